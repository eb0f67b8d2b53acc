"""streaming_app."""
