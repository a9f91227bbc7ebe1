#!/usr/bin/env bash
# Proves the README's two commands on a bare Debian root (R-OP6): Debian 12 "minbase" with only
# Python, Node and apt (plus make, which runs the two commands), the checkout's HEAD cloned into
# it, then `make run` (until it answers) and `make test`. See docs/fresh-machine.md.
#
# Usage, as root on Debian with mmdebstrap and bubblewrap:  scripts/prove-fresh-machine.sh [ROOT]
set -euo pipefail
checkout=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-$(mktemp -d /var/tmp/fresh-root.XXXXXX)}

if [ ! -x "$root/usr/bin/python3" ]; then
  mmdebstrap --variant=minbase --include=python3,python3-venv,make,ca-certificates bookworm "$root"
fi
# Node 20 as this machine has it (Debian 12's own nodejs is 18, too old for the engine CLIs).
cp /usr/bin/node "$root/usr/bin/node"
mkdir -p "$root/usr/lib/node_modules" && cp -a /usr/lib/node_modules/npm "$root/usr/lib/node_modules/"
ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/bin/npm"
# apt: the same suites as this machine; as in any container image, packages start no services.
cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/" && rm -f "$root/etc/apt/sources.list"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod +x "$root/usr/sbin/policy-rc.d"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The machine's own CA certificates (a workplace may reach the registries through a TLS-inspecting
# proxy), and the variables that point pip and Node at them; nothing else of the machine.
if compgen -G '/usr/local/share/ca-certificates/*.crt' >/dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  chroot "$root" update-ca-certificates >/dev/null
fi
ca_env=()
for var in PIP_CERT NODE_EXTRA_CA_CERTS SSL_CERT_FILE REQUESTS_CA_BUNDLE; do
  if [ -n "${!var:-}" ]; then ca_env+=(--setenv "$var" "${!var}"); fi
done
rm -rf "$root/root/skillrunner" && git clone -q "$checkout" "$root/root/skillrunner"

# The root becomes / through bwrap (pivot_root, not chroot, so the engine sandbox may nest
# namespaces), with its own pid/ipc/uts namespaces. The network is shared for the package
# registries, so this machine's own PostgreSQL and Redis are put out of the suite's reach by
# pointing SCALEOUT_* at a closed port: `make test` must start private servers.
enter() {
  bwrap --bind "$root" / --proc /proc --dev /dev --perms 1777 --tmpfs /dev/shm \
    --unshare-pid --unshare-ipc --unshare-uts --hostname fresh --die-with-parent --cap-add ALL \
    --clearenv --setenv PATH /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --setenv HOME /root --setenv LANG C.UTF-8 "${ca_env[@]}" --chdir /root/skillrunner -- "$@"
}

enter bash -euo pipefail -c '
  set -m
  PORT=18765 make run >/root/make-run.log 2>&1 &
  server=$!
  for _ in $(seq 600); do
    if python3 -c "import urllib.request as u; u.urlopen(\"http://127.0.0.1:18765/v1/system/ping\", timeout=2)" 2>/dev/null; then
      break
    fi
    kill -0 $server 2>/dev/null || { tail -30 /root/make-run.log; exit 1; }
    sleep 1
  done
  python3 -c "import urllib.request as u; print(\"make run: ping\", u.urlopen(\"http://127.0.0.1:18765/v1/system/ping\").status)"
  kill -TERM -$server; wait $server || true
'
enter env SCALEOUT_DATABASE_URL=postgres://postgres@127.0.0.1:9/postgres SCALEOUT_REDIS_URL=redis://127.0.0.1:9/0 \
  make test
