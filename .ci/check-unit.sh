#!/usr/bin/env bash
# Checks deploy/systemd/ovstream.service with systemd-analyze (make test):
# `verify` with ExecStart pointed at the binary just built must print nothing
# (it exits 0 on keys it ignores, so any output fails), `security --offline`
# must rate the hardening at most 2.0 ("OK"), and the restart policy must be
# the one the README describes. Needs systemd-analyze (Debian: systemd).
set -euo pipefail
cd "$(dirname "$0")/.."
unit=deploy/systemd/ovstream.service
bin=${1:-bin/ovstream}
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "check-unit: systemd-analyze is missing (Debian: apt-get install systemd; .ci/run does)" >&2
  exit 1
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
sed "s#/usr/local/bin/ovstream#$(realpath "$bin")#" "$unit" >"$dir/ovstream.service"
out=$(systemd-analyze verify "$dir/ovstream.service" 2>&1) || { echo "$out" >&2; exit 1; }
if [ -n "$out" ]; then
  echo "check-unit: systemd-analyze verify $unit:" >&2
  echo "$out" >&2
  exit 1
fi
systemd-analyze security --offline=yes --threshold=20 --no-pager "$dir/ovstream.service" >"$dir/security" 2>&1 ||
  { tail -n 5 "$dir/security" >&2; echo "check-unit: exposure above 2.0" >&2; exit 1; }
for want in '^Restart=on-failure$' '^RestartPreventExitStatus=.*\b3\b' '^EnvironmentFile=/etc/ovstream/ovstream.env$' \
  '^ExecStart=/usr/local/bin/ovstream run ' '^KillSignal=SIGTERM$' '^NoNewPrivileges=yes$' '^DynamicUser=yes$'; do
  grep -Eq "$want" "$unit" || { echo "check-unit: $unit has no line matching $want" >&2; exit 1; }
done
echo "check-unit: $unit verified ($(grep -o 'Overall exposure level.*' "$dir/security"))"
