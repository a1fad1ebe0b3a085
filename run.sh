#!/usr/bin/env bash
# The two set-up commands of the README:
#   ./run.sh demo   create .venv, install, optimize a synthetic dataset, stream it with tracing, print a summary
#   ./run.sh test   create .venv, install with the test extras, run lint, layer checks and the whole test suite
#                   (LitData 0.2.68 in the venv), then the interop tests again against LitData 0.2.76
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=${STREAMSCOPE_VENV:-.venv}
LITDATA076=.litdata-0.2.76

setup() {
    local extras=$1
    if [ ! -x "$VENV/bin/python" ]; then
        "$PY" -m venv "$VENV"
    fi
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -U pip
    # torch first and pinned: a CPU wheel pip finds locally; any other version downloads gigabytes.
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==2.13.0"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$extras]"
}

case "${1:-}" in
    demo)
        shift
        setup "s3,image,trace"
        exec "$VENV/bin/python" -m streamscope demo "$@"
        ;;
    test)
        shift
        setup "test"
        # The real LitData, for the interop tests. --no-deps: it declares an unpinned torchvision that would
        # replace torch 2.13.0 with a multi-GB build; its other requirements are in our test extras.
        "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps "litdata==0.2.68"
        # The current LitData beside it, in a folder of its own (same requirements as 0.2.68): first on
        # PYTHONPATH for the second pass, and found through STREAMSCOPE_LITDATA076_DIR by the tests that need
        # both versions at once.
        if ! grep -qs '^__version__ = "0.2.76"' "$LITDATA076/litdata/__about__.py"; then
            "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --upgrade \
                --target "$LITDATA076" "litdata==0.2.76"
        fi
        export STREAMSCOPE_LITDATA076_DIR="$PWD/$LITDATA076"
        "$VENV/bin/ruff" check .
        "$VENV/bin/lint-imports"
        status=0
        "$VENV/bin/python" -m pytest -n 2 --dist loadfile -q "$@" || status=$?
        # Second pass: the tests marked interop (every test that uses the real LitData) against LitData 0.2.76.
        echo "== interop tests against LitData 0.2.76 ($LITDATA076 first on PYTHONPATH)"
        second=0
        PYTHONPATH="$STREAMSCOPE_LITDATA076_DIR${PYTHONPATH:+:$PYTHONPATH}" \
            "$VENV/bin/python" -m pytest -n 2 --dist loadfile -q -m "interop and not heavy" "$@" || second=$?
        [ "$second" -eq 5 ] && second=0  # the selection held no interop test
        [ "$status" -ne 0 ] && exit "$status"
        exit "$second"
        ;;
    *)
        echo "usage: ./run.sh demo|test [args]" >&2
        exit 2
        ;;
esac
