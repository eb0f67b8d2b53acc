"""The dev stack: servers of our own on loopback (Kafka broker, Kafka Connect, the S3 server,
PostgreSQL, MariaDB) on one base class, and the generators that feed the demos and tests
(Debezium-shaped records, seeded database histories). Apart from the product path: the job
never imports it; the CLI's `broker`, `s3`, `postgres`, `mariadb`, `connect` and `produce`
commands, the demos, the tests and the benches do."""
