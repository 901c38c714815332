# Sourced by the scripts of scripts/ that need tools: `need TOOL[:PACKAGE] ...` checks
# each is on PATH and, when any is not, says in one line what to install, and exits 1.
# (Debian's podman installs crun, but deploy/podman/containers.conf asks for runc; the
# base image is made with debootstrap.) Also sets CONTAINERS_CONF to the repository's
# file when unset: without its ulimits a container fails with `crun: setrlimit
# RLIMIT_NOFILE: Operation not permitted` on these machines (docs/deploying.md).
need() {
  local missing=() tool package
  for spec in "$@"; do
    tool=${spec%%:*}
    package=${spec#*:}
    command -v "$tool" >/dev/null 2>&1 || PATH=$PATH:/usr/sbin:/sbin command -v "$tool" >/dev/null 2>&1 \
      || missing+=("$package")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "$(basename "$0"): missing prerequisites; install them: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/deploy/podman/containers.conf}
