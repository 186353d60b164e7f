#!/usr/bin/env bash
# make dist: build an sdist and a wheel of every distribution under packages/, check their metadata, then
# install each wheel in a fresh virtualenv from the built wheels and the package registry only (never the
# checkout) and run its smoke test there.
#
#   bash .ci/dist.sh                     # all of them
#   bash .ci/dist.sh relight-torch       # build all, smoke-test the ones named
#
# Environment: DIST (default dist/), DIST_VENVS (where the throwaway virtualenvs go; default a temporary
# folder, removed at the end), DIST_JOBS (smoke tests at once, default 4).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIST=$(realpath -m "${DIST:-dist}")
VENVS=${DIST_VENVS:-$(mktemp -d)}
trap '[ -n "${DIST_VENVS:-}" ] || rm -rf "$VENVS"' EXIT
clock() { date +%s; }
main() {
started=$(clock)
export COLUMNS=${COLUMNS:-120}  # the dev-mode tables, readable in a log

# -- build and check ----------------------------------------------------------------------------------
# The tools get a virtualenv of their own (requirements-dist.txt); its pip drives every other virtualenv.
TOOLS="$VENVS/tools"
python3 -m venv "$TOOLS"
PY="$TOOLS/bin/python"
"$PY" -m pip install -q --disable-pip-version-check -r requirements-dist.txt 2> >(grep -v "is ignored: it is neither" >&2)
rm -rf "$DIST" && mkdir -p "$DIST"
for package in packages/*/; do
    # No build isolation: hatchling comes from the tools' virtualenv, which spares eight throwaway build
    # environments; the artifacts are the same.
    "$PY" -m build --no-isolation --sdist --wheel --outdir "$DIST" "$package" >"$VENVS/build.log" 2>&1 ||
        { cat "$VENVS/build.log" >&2; exit 1; }
done
count=$(find "$DIST" -name '*.whl' -o -name '*.tar.gz' | wc -l)
expected=$((2 * $(find packages -mindepth 1 -maxdepth 1 -type d | wc -l)))
[ "$count" = "$expected" ] || { echo "built $count artifacts, expected $expected" >&2; exit 1; }
"$PY" -m twine check --strict "$DIST"/*
echo "dist: $count artifacts built and checked in $(($(clock) - started)) s"

# -- one fresh virtualenv per distribution ------------------------------------------------------------
wheel() { ls "$DIST"/"$(echo "$1" | tr - _)"-*.whl; }
PYTEST_KIT="pytest-asyncio>=0.24 pytest-timeout>=2.3"  # what the repository's pytest settings name

# The pip command for a virtualenv: the tools' pip drives it (--python), so a venv needs no pip of its
# own. Pins from constraints.txt keep the framework versions the adapters are tested with.
install() {
    local venv=$1; shift
    # (grep drops pip's notes about index folders this machine's pip configuration names but lacks.)
    # --no-compile: no bytecode for the thousands of modules torch, verl and crewai bring (most never imported
    # here); Python compiles what a smoke test imports.
    "$PY" -m pip --python "$venv/bin/python" install -q --no-compile --disable-pip-version-check \
        -c "$ROOT/constraints.txt" "$@" \
        2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

smoke() {
    local name=$1 venv="$VENVS/$1" began
    began=$(clock)
    rm -rf "$venv" && python3 -m venv --without-pip "$venv"
    case $name in
        relight)
            install "$venv" "$(wheel relight)"
            (cd "$venv" && ./bin/python "$ROOT/.ci/smoke/relight_core.py") ;;
        relight-testing)
            install "$venv" "$(wheel relight-testing)" "$(wheel relight)" pytest-timeout  # its own dependencies do the rest
            "$venv/bin/python" -m pytest -q -p no:cacheprovider .ci/smoke/test_testing_kit.py ;;
        relight-langgraph | relight-autogen | relight-openai-agents | relight-crewai)
            local folder=packages/adapter-${name#relight-} extra=""
            case $name in
                relight-langgraph) extra="langgraph>=1.0 langchain-openai>=1.0" ;;  # what the example app uses
                relight-autogen) extra="autogen-ext[openai]>=0.7,<0.8" ;;
            esac
            install "$venv" "$(wheel "$name")" "$(wheel relight)" "$(wheel relight-testing)" $PYTEST_KIT $extra
            "$venv/bin/python" -c "import sys, ${name//-/_} as m; assert m.__file__.startswith(sys.prefix), m.__file__"
            "$venv/bin/python" -m pytest -q -p no:cacheprovider "$folder/tests/test_conformance.py" ;;
        relight-torch)
            install "$venv" torch==2.13.0  # first and pinned: an unpinned torch pulls a CUDA build
            install "$venv" "$(wheel relight-torch)" "$(wheel relight)"
            (cd "$venv" && ./bin/python -m relight_torch.demo --out run --sft-steps 2 --iterations 1 --tasks 2 \
                --samples 2 --eval-tasks 2 && test -f run/summary.json) ;;
        relight-apo)
            install "$venv" "$(wheel relight-apo)" "$(wheel relight)"
            (cd "$venv" && ./bin/python "$ROOT/.ci/smoke/apo_search.py") ;;
        relight-verl)
            install "$venv" torch==2.13.0
            install "$venv" "$(wheel relight-verl)" "$(wheel relight)"
            (cd "$venv" && ./bin/python "$ROOT/.ci/smoke/trainer_verl.py") ;;
        *) echo "no smoke test for $name" >&2; return 1 ;;
    esac
    rm -rf "$venv"
    echo "dist: $name installed from its wheel and smoke-tested in $(($(clock) - began)) s"
}

# The smoke tests run a few at a time: their installs mostly wait on the registry, not the CPU. Each writes
# its own log, printed when it fails.
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(relight-torch relight-verl relight-crewai relight-langgraph relight-autogen
    relight-openai-agents relight-testing relight-apo relight)
JOBS=${DIST_JOBS:-4}
declare -A pids=()
for name in "${names[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
    smoke "$name" >"$VENVS/$name.log" 2>&1 &
    pids[$name]=$!
done
failed=()
for name in "${names[@]}"; do
    if wait "${pids[$name]}"; then
        tail -n 1 "$VENVS/$name.log"
    else
        failed+=("$name"); echo "---- $name failed:"; tail -n 60 "$VENVS/$name.log"
    fi
done
[ ${#failed[@]} = 0 ] || { echo "dist: smoke tests failed: ${failed[*]}" >&2; exit 1; }
echo "dist: ${#names[@]} distribution(s) passed in $(($(clock) - started)) s"
}

# Parsed whole before it runs: editing this file during a long run cannot change the run.
main "$@"
