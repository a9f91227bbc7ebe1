#!/usr/bin/env bash
# Installs through apt, in one step, the programs the test suite runs that this machine lacks
# (R-OP6): bubblewrap, socat and libseccomp (the engine sandbox and its seccomp filter, SPEC §11),
# Chromium (browser tests), PostgreSQL and Redis servers (scale-out tests; scripts/test_servers.py
# starts private instances of them). With --sandbox-only (`make run`): the sandbox's programs only.
set -euo pipefail
missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v socat >/dev/null || missing+=(socat)
[[ "$(/sbin/ldconfig -p)" == *"libseccomp.so.2 "* ]] || missing+=(libseccomp2)
if [ "${1:-}" != --sandbox-only ]; then
  test -x /usr/bin/chromium || missing+=(chromium)
  command -v redis-server >/dev/null || missing+=(redis-server)
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
fi
if ((${#missing[@]})); then
  sudo=$( [ "$(id -u)" = 0 ] || echo sudo )
  echo "installing through apt: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
