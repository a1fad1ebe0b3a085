#!/usr/bin/env bash
# The two set-up commands of the README:
#   ./run.sh demo   create .venv, install, optimize a synthetic dataset, stream it with tracing, print a summary
#   ./run.sh test   create .venv, install with the test extras, run lint, layer checks and the whole test suite
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
VENV=${STREAMSCOPE_VENV:-.venv}

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
        # Azurite, the Azure Blob emulator of tests/support/azurite.py (npm; once, into .cache/azurite)
        if [ ! -x .cache/azurite/node_modules/.bin/azurite-blob ]; then
            if command -v npm >/dev/null; then
                npm install --prefix .cache/azurite --no-audit --no-fund --loglevel=error "azurite@3.35.0" \
                    || echo "run.sh: installing Azurite failed: the azure:// emulator tests cannot run" >&2
            else
                echo "run.sh: npm not found: the azure:// emulator tests cannot run" >&2
            fi
        fi
        "$VENV/bin/ruff" check .
        "$VENV/bin/lint-imports"
        exec "$VENV/bin/python" -m pytest -n 2 --dist loadfile -q "$@"
        ;;
    *)
        echo "usage: ./run.sh demo|test [args]" >&2
        exit 2
        ;;
esac
