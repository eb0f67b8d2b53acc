# Two commands do everything on a fresh clone:  make demo  |  make test
# (Python deps from PyPI into .venv/, JVM jars from Maven Central into git-ignored folders.)

PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
MVN     := mvn -q -B -s jvm/settings.xml
STAMP   := $(VENV)/.installed

.PHONY: setup jars venv postgres mariadb jvm-archive pyfiles demo demo-postgres demo-mariadb test test-fast test-slow bench clean broker-start broker-stop

setup: venv jars postgres mariadb jvm-archive pyfiles

venv: $(STAMP)
$(STAMP): pyproject.toml
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip setuptools wheel
	$(VPY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

jars: jvm/spark/jars/.done jvm/kafka/libs/.done jvm/connect/libs/.done jvm/s3proxy/libs/.done jvm/s3a/jars/.done jvm/registry/app/.done
jvm/spark/jars/.done: jvm/spark/pom.xml jvm/settings.xml
	rm -rf jvm/spark/jars
	$(MVN) -f jvm/spark/pom.xml dependency:copy-dependencies -DoutputDirectory=jars -DincludeScope=runtime
	touch $@
jvm/kafka/libs/.done: jvm/kafka/pom.xml jvm/settings.xml
	rm -rf jvm/kafka/libs
	$(MVN) -f jvm/kafka/pom.xml dependency:copy-dependencies -DoutputDirectory=libs -DincludeScope=runtime
	touch $@
jvm/connect/libs/.done: jvm/connect/pom.xml jvm/settings.xml
	rm -rf jvm/connect/libs
	$(MVN) -f jvm/connect/pom.xml dependency:copy-dependencies -DoutputDirectory=libs -DincludeScope=runtime
	touch $@
jvm/s3proxy/libs/.done: jvm/s3proxy/pom.xml jvm/settings.xml
	rm -rf jvm/s3proxy/libs
	$(MVN) -f jvm/s3proxy/pom.xml dependency:copy-dependencies -DoutputDirectory=libs -DincludeScope=runtime
	touch $@
# Apicurio Registry (ivmstream registry): a tarball with its own runner jar and lib/, unpacked.
# (Maven's unpack markers go too: left behind, they would skip the next unpack.)
jvm/registry/app/.done: jvm/registry/pom.xml jvm/settings.xml
	rm -rf jvm/registry/app jvm/registry/target
	$(MVN) -f jvm/registry/pom.xml dependency:unpack-dependencies -DoutputDirectory=app
	rm -rf jvm/registry/target
	touch $@
jvm/s3a/jars/.done: jvm/s3a/pom.xml jvm/settings.xml
	rm -rf jvm/s3a/jars
	$(MVN) -f jvm/s3a/pom.xml dependency:copy-dependencies -DoutputDirectory=jars -DincludeScope=runtime
	touch $@

# Class-data-sharing archive of the driver JVM (streaming_app/jvm_archive.py): a local job's
# JVM starts seconds sooner. Remade when the jars or the Python packages change.
jvm-archive: jvm/cds/spark.jsa
jvm/cds/spark.jsa: jvm/spark/jars/.done $(STAMP) streaming_app/jvm_archive.py
	$(VPY) -m streaming_app.jvm_archive

# The project's packages zipped for spark-submit --py-files (dist/ivmstream.zip, git-ignored):
# remade when a source file is newer (`ivmstream submit` checks the same).
pyfiles: venv
	$(VPY) -c "from streaming_app.submit import build_py_files; build_py_files()"

# PostgreSQL server binaries (Debian's package) for the real CDC chain; nothing when present.
# No default cluster: ivmstream runs its own server in a folder of its own (ivmstream postgres).
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "installing PostgreSQL (apt-get)"; \
	  mkdir -p /etc/postgresql-common/createcluster.d && \
	  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/ivmstream.conf && \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }

# MariaDB server binaries (Debian's server-core package: no init scripts, no service started);
# nothing when present. ivmstream runs its own server in a folder of its own (ivmstream mariadb).
mariadb:
	@test -x /usr/sbin/mariadbd -a -x /usr/bin/mariadb-install-db || { \
	  echo "installing MariaDB (apt-get)"; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    mariadb-server-core mariadb-client-core >/dev/null; }

demo: setup
	$(VPY) -m streaming_app demo --duration $${DURATION:-60}

# The real chain: PostgreSQL -> Debezium (Kafka Connect) -> Kafka -> the job, all local.
demo-postgres: setup
	$(VPY) -m streaming_app demo --source postgres --duration $${DURATION:-180}

# The same chain from MariaDB through Debezium's MySQL connector.
demo-mariadb: setup
	$(VPY) -m streaming_app demo --source mariadb --duration $${DURATION:-180}

# Two tiers (tests/README.md): the fast one first, and nothing slower runs if it fails.
test: setup
	$(MAKE) --no-print-directory test-fast
	$(MAKE) --no-print-directory test-slow

# Pure-Python tests (no Spark, Kafka, PostgreSQL or S3 server): a few minutes.
test-fast: venv
	$(VPY) -m pytest -q -p no:cacheprovider -m "not spark and not kafka and not postgres and not s3 and not mariadb and not cluster and not registry" $(PYTEST_ARGS)

# Spark, Kafka, PostgreSQL, MariaDB, Kafka Connect, S3-server and Spark standalone cluster tests, the slowest listed at the end.
test-slow: setup
	$(VPY) -m pytest -q -p no:cacheprovider -m "spark or kafka or postgres or s3 or mariadb or cluster or registry" --durations=15 $(PYTEST_ARGS)

broker-start: setup
	$(VPY) -m streaming_app broker start
broker-stop:
	$(VPY) -m streaming_app broker stop

clean:
	rm -rf var/ lake/ checkpoints/*/ .pytest_cache
