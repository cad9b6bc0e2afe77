#!/usr/bin/env bash
# CI as a newcomer's machine runs it: a fresh clone of a commit (default: the branch main of this
# repository) in a temporary folder, a new empty HOME (so no cache, no downloaded Kafka, no cargo
# registry, no npm/pip/Go/Maven cache, no ~/.npmrc), then the whole `.ci/run` with CI=true and no
# standard input. Run it before resolving an issue: a green run on a warm HOME can hide a missing
# install step.
#
#   scripts/ci-fresh.sh [REF]      REF: what to clone (default main); prints the time it took
#
#   KMIRROR_CI_FRESH_KEEP=1        keep the clone and the HOME afterwards (they are removed on success)
#
# Only the toolchains the machine provides stay reachable: rustup's toolchains (RUSTUP_HOME) and
# pyenv's Pythons (PYENV_ROOT) live under the old HOME on this kind of machine, so they are named
# explicitly; everything the project installs itself starts empty. What it cannot take away:
# the machine's own packages (Node's headers, a JDK, compilers) and components already added to
# those toolchains, which a new machine of this kind has too.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
ref="${1:-main}"
git -C "$repo" rev-parse --verify --quiet "$ref^{commit}" >/dev/null || {
  echo "ci-fresh.sh: $ref is not a commit of $repo" >&2
  exit 2
}

work="$(mktemp -d "${TMPDIR:-/tmp}/kmirror-ci-fresh.XXXXXX")"
clone="$work/main"
home="$work/home"
mkdir -p "$home"
git clone --quiet --no-local "$repo" "$clone"
git -C "$clone" checkout --quiet --detach "$(git -C "$repo" rev-parse "$ref^{commit}")"
# CI lays a read-only copy of shared/ beside the clone; do the same when there is one.
[ -d "$repo/../shared" ] && ln -s "$(cd "$repo/../shared" && pwd)" "$work/shared"

cleanup_on_signal() {
  echo "ci-fresh.sh: interrupted; removing $work" >&2
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
  exit 130
}
trap cleanup_on_signal INT TERM

old_home="$HOME"
toolchains=(HOME="$home" CI=true)
toolchains+=(RUSTUP_HOME="${RUSTUP_HOME:-$old_home/.rustup}" CARGO_HOME="$home/.cargo")
[ -d "${PYENV_ROOT:-$old_home/.pyenv}" ] && toolchains+=(PYENV_ROOT="${PYENV_ROOT:-$old_home/.pyenv}")
# The machine's environment stays (CI has it), but nothing a session set up in the old HOME:
# PATH keeps only the toolchains' entries there (rustup's proxies, pyenv's shims), and the
# variables of caches, tool overrides, virtual environments and the tests' own are unset.
path=""
IFS=: read -ra entries <<<"$PATH"
for entry in "${entries[@]}"; do
  case "$entry" in
    "$old_home/.cargo/bin" | "$old_home"/.pyenv/* | "$old_home"/go/bin) path="$path:$entry" ;;
    "$old_home"/*) ;;
    *) path="$path:$entry" ;;
  esac
done
toolchains+=(PATH="${path#:}")
unset XDG_CACHE_HOME GOPATH GOMODCACHE GOCACHE npm_config_cache npm_config_nodedir CARGO_TARGET_DIR \
  RUSTC_WRAPPER VIRTUAL_ENV PYTHONUSERBASE NODE_PATH JAVA_TOOL_OPTIONS MAVEN_OPTS
while IFS='=' read -r name _; do
  case "$name" in KMIRROR_* | CARGO_* | NEMESIS_* | COMPAT_*) unset "$name" ;; esac
done < <(env)

echo "ci-fresh.sh: $(git -C "$clone" log --oneline -1) in $clone, HOME=$home"
started=$SECONDS
status=0
(cd "$clone" && env "${toolchains[@]}" bash .ci/run </dev/null) || status=$?
elapsed=$((SECONDS - started))
echo "ci-fresh.sh: .ci/run exited $status after ${elapsed} s ($((elapsed / 60)) min $((elapsed % 60)) s)"
if [ "$status" = 0 ] && [ -z "${KMIRROR_CI_FRESH_KEEP:-}" ]; then
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
else
  echo "ci-fresh.sh: kept $work"
fi
exit "$status"
