# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
# The Spark line (docs/spark-lines.md): 4 (the default) or 3.5, pyproject's spark4/spark35
# extra. Each line has its own virtual environment named after it (.venv-spark4,
# .venv-spark35), so switching lines never reinstalls the other one.
SPARK ?= 4
SPARK_EXTRA := $(if $(filter 4,$(SPARK)),spark4,$(if $(filter 3.5,$(SPARK)),spark35,$(error SPARK must be 4 or 3.5, not $(SPARK))))
VENV ?= .venv-$(SPARK_EXTRA)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(SPARK_EXTRA)

.PHONY: demo test test-cross lint docs bench bench-sf1 bench-load fuzz clean keycloak

# A virtual environment that holds another line (or none: an interrupted install), as
# governance/spark_line.py reads its pyspark, is made again from nothing: installing one
# line over the other leaves the first line's packages behind.
$(STAMP): pyproject.toml
	[ "$$($(PY) governance/spark_line.py 2>/dev/null)" = "$(SPARK)" ] || \
	  { rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,$(SPARK_EXTRA)]'
	[ "$$($(PY) governance/spark_line.py)" = "$(SPARK)" ]
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/lakegate demo --dir demo-lakehouse

# Browser tests (web console, HTML audit report) drive Debian's chromium through Playwright.
CHROMIUM ?= /usr/bin/chromium
$(CHROMIUM):
	SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); $$SUDO apt-get install -y -q chromium || \
	  { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }

# The identity tests' Keycloak (tests/identity/keycloak.py starts it): the quarkus
# distribution from Maven Central through mvn, unpacked into the git-ignored .cache/keycloak/dist;
# a no-op once there, fetched again when KEYCLOAK_VERSION changes. It runs on Java 21+
# (the tests look for one under /usr/lib/jvm); mvn itself is Debian's maven.
KEYCLOAK_VERSION := 26.5.6
KEYCLOAK_CACHE := .cache/keycloak
KEYCLOAK_STAMP := $(KEYCLOAK_CACHE)/.installed-$(KEYCLOAK_VERSION)
$(KEYCLOAK_STAMP):
	command -v mvn >/dev/null || { SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get install -y -q maven || { $$SUDO apt-get update -q && $$SUDO apt-get install -y -q maven; }; }
	rm -rf $(KEYCLOAK_CACHE) && mkdir -p $(KEYCLOAK_CACHE)
	mvn -q -B dependency:copy -Dartifact=org.keycloak:keycloak-quarkus-dist:$(KEYCLOAK_VERSION):tar.gz \
	  -DoutputDirectory=$(KEYCLOAK_CACHE)
	tar -xzf $(KEYCLOAK_CACHE)/keycloak-quarkus-dist-$(KEYCLOAK_VERSION).tar.gz -C $(KEYCLOAK_CACHE)
	mv $(KEYCLOAK_CACHE)/keycloak-$(KEYCLOAK_VERSION) $(KEYCLOAK_CACHE)/dist
	rm $(KEYCLOAK_CACHE)/keycloak-quarkus-dist-$(KEYCLOAK_VERSION).tar.gz
	touch $@

keycloak: $(KEYCLOAK_STAMP)

# The LDAP group sync tests (tests/identity/slapd.py) start a slapd of their own, as the
# current user, on free loopback ports; Debian's slapd and ldap-utils provide the binaries.
# The service the package's postinst may start is stopped again: no test uses it.
SLAPD ?= /usr/sbin/slapd
$(SLAPD):
	SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  APT="$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q slapd ldap-utils"; \
	  $$APT || { $$SUDO apt-get update -q && $$APT; }; \
	  $$SUDO service slapd stop >/dev/null 2>&1 || true

# The README's test command, and all CI runs: the whole suite on the line SPARK names, then
# (from the default line) the cross-line suites on the other line.
OTHER_SPARK := $(if $(filter 4,$(SPARK)),3.5,4)
EXTRA_OTHER := $(if $(filter 4,$(SPARK)),spark35,spark4)
VENV_OTHER := .venv-$(EXTRA_OTHER)
test: $(STAMP) $(CHROMIUM) $(KEYCLOAK_STAMP) $(SLAPD)
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q
	$(if $(CROSS_DONE),,$(MAKE) test-cross SPARK=$(OTHER_SPARK) CROSS_DONE=1)

# The cross-line suites on the line SPARK names (`make test-cross SPARK=3.5`, which CI runs
# after `make test` on the default line): security with the differential oracle, the
# ANSI-mode answers, and the Connect gateway with the stock clients of both lines.
CROSS_SUITES ?= tests/security tests/governance/test_ansi_off_same_answers.py tests/api/connect
test-cross: $(STAMP) $(KEYCLOAK_STAMP)
	$(PY) -m pytest -q $(CROSS_SUITES)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

# The documentation site (mkdocs.yml, pages under docs/) into site/; --strict fails on any
# broken link, missing page or nav problem.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(PY) benchmarks/run_all.py $(BENCH_ARGS)

# The issue 14/31 run: TPC-DS at scale factor 1 over all 99 queries, 3 rounds, then the
# TPC-DS and Connect steps again on the other Spark line (its venv is built first); about
# two hours on 2 cores. Delta tables are kept in bench-sf1/ and reused at the same scale.
bench-sf1: $(STAMP)
	$(MAKE) $(VENV_OTHER)/.installed-$(EXTRA_OTHER) SPARK=$(OTHER_SPARK)
	$(PY) benchmarks/run_all.py --sf 1 --rounds 3 --workdir bench-sf1 --other-line $(BENCH_ARGS)

# The issue 39 run: N = 1, 8, 32, 64 stock Spark Connect clients through the gateway and
# on plain Spark Connect, N REST clients and the floor (plain Spark Connect over each user's
# governed views), TPC-DS sf 1 queries in the mix (written once into bench-sf1/, shared
# with bench-sf1), 2 runs per side per N, fairness and the hour's soak; then the same N and
# sides on the other Spark line. Writes bench-load.json and the load section of
# benchmarks/REPORT.md. About 4 h 15 on 2 cores (the floor's share estimated; README:
# Benchmarks).
LOAD_ARGS ?= --clients 1,8,32,64 --seconds 60 --reps 2 --rest --floor --tpcds-scale 1 \
	--fairness --soak-minutes 60
bench-load: $(STAMP)
	$(MAKE) $(VENV_OTHER)/.installed-$(EXTRA_OTHER) SPARK=$(OTHER_SPARK)
	$(PY) benchmarks/load.py $(LOAD_ARGS) --other-line $(VENV_OTHER)/bin/python \
	  --json bench-load.json --report benchmarks/REPORT.md

# The correctness oracle (tests/security/test_differential.py) with many more examples
# than the normal suite runs, freshly random each time (`make test` replays the same
# derandomized examples every run); FUZZ_EXAMPLES=N overrides the count.
FUZZ_EXAMPLES ?= 2000
fuzz: $(STAMP)
	LAKEGATE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest -q tests/security/test_differential.py

clean:
	rm -rf demo-lakehouse bench-sf1 bench-load.json site .pytest_cache
