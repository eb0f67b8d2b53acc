"""From-scratch oracles the tests (and benchmarks) compare the engines with; never imported by the product."""
