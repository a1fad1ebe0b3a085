#!/usr/bin/env bash
# The two set-up commands of the README:
#   ./run.sh demo   create .venv, install, optimize a synthetic dataset, stream it with tracing (its metrics served
#                   for Prometheus meanwhile), print a summary
#   ./run.sh test   create .venv, install with the test extras, run lint, layer checks, mypy and the whole test suite
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

# ---- observability test components (issue 23; tests/support/{prometheus_server,grafana_schema,tmux_driver}.py) ----
# The real Prometheus 2.42 + promtool and tmux from Debian, @grafana/schema + tsc from npm. Idempotent: each step
# runs only when its component is missing. Without root or apt the tests that need them skip (and fail under CI=true).
OBS_CACHE=.cache
install_observability_tools() {
    mkdir -p "$OBS_CACHE"
    local missing=() log="$OBS_CACHE/apt-install.log"
    { command -v prometheus && command -v promtool; } >/dev/null || missing+=(prometheus)
    command -v tmux >/dev/null || missing+=(tmux)
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            # A service the package would start is not wanted (the tests start their own on free ports): where no
            # policy-rc.d forbids it, forbid it for this install. Where one exists its "invoke-rc.d: policy-rc.d
            # denied execution of start." is expected and harmless.
            local own_policy=""
            if [ ! -e /usr/sbin/policy-rc.d ]; then
                printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && own_policy=1
            fi
            echo "installing ${missing[*]} with apt-get (log: $log)"
            # A stale or empty package index fails the first try: update it once, then retry.
            if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
                DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$log" 2>&1 || true
                DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1 \
                    || { tail -20 "$log" >&2; echo "warning: apt-get could not install ${missing[*]}" >&2; }
            fi
            if [ -n "$own_policy" ]; then rm -f /usr/sbin/policy-rc.d; fi
        else
            echo "warning: ${missing[*]} missing and not installable here (needs root and apt-get)" >&2
        fi
    fi
    local gs="$OBS_CACHE/grafana-schema"
    if [ ! -x "$gs/node_modules/.bin/tsc" ] || ! grep -q '"version": "11.6.0"' "$gs/node_modules/@grafana/schema/package.json" 2>/dev/null; then
        if command -v npm >/dev/null; then
            npm install --prefix "$gs" --no-audit --no-fund --loglevel=error "@grafana/schema@11.6.0" "typescript@5" >/dev/null \
                || echo "warning: npm could not install @grafana/schema and typescript" >&2
        else
            echo "warning: npm missing: dashboards cannot be type-checked" >&2
        fi
    fi
}
# Azurite, the Azure Blob emulator of tests/support/azurite.py (npm; once, into .cache/azurite)
install_azurite() {
    if [ ! -x "$OBS_CACHE/azurite/node_modules/.bin/azurite-blob" ]; then
        if command -v npm >/dev/null; then
            npm install --prefix "$OBS_CACHE/azurite" --no-audit --no-fund --loglevel=error "azurite@3.35.0" >/dev/null \
                || echo "run.sh: installing Azurite failed: the azure:// emulator tests cannot run" >&2
        else
            echo "run.sh: npm not found: the azure:// emulator tests cannot run" >&2
        fi
    fi
}
# ---- end of observability test components ----

case "${1:-}" in
    demo)
        shift
        setup "s3,image,trace,prometheus"
        exec "$VENV/bin/python" -m streamscope demo "$@"
        ;;
    test)
        shift
        mkdir -p "$OBS_CACHE"
        # Byte-code caches on, kept out of the tree: where the environment sets PYTHONDONTWRITEBYTECODE, every pytest
        # process (two xdist workers per pass, two passes) and every spawned test process would compile streamscope
        # and redo pytest's assertion rewriting of ~300 test modules (~20 s of CPU a collection on 2 cores).
        unset PYTHONDONTWRITEBYTECODE
        export PYTHONPYCACHEPREFIX="$PWD/$OBS_CACHE/pycache"
        # The downloads that need no venv run beside the venv's install; their output is shown once they are done.
        install_observability_tools >"$OBS_CACHE/observability-tools.log" 2>&1 &
        local_tools=$!
        install_azurite >"$OBS_CACHE/azurite-install.log" 2>&1 &
        azurite=$!
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
        # One collection on one core fills the caches while the linters run on the other (its errors, if any,
        # come again from the test run itself).
        "$VENV/bin/python" -m pytest --collect-only -q "$@" >"$OBS_CACHE/collect.log" 2>&1 &
        warm=$!
        "$VENV/bin/ruff" check .
        "$VENV/bin/lint-imports"
        "$VENV/bin/mypy"  # settings in pyproject.toml: strict on src/streamscope, relaxed per module where listed
        wait "$warm" || true
        for job in "$local_tools:observability-tools" "$azurite:azurite-install"; do
            wait "${job%%:*}" || true
            cat "$OBS_CACHE/${job#*:}.log"
        done
        status=0
        "$VENV/bin/python" -m pytest -n 2 --dist loadfile -q "$@" || status=$?
        # Second pass: the tests marked interop (every test that uses the real LitData) against LitData 0.2.76,
        # but for the 26 marked slow (LitData optimize parity runs): they keep CI under its 20 minutes; run them with
        # `PYTHONPATH=$STREAMSCOPE_LITDATA076_DIR pytest -m "interop and slow"`.
        echo "== interop tests against LitData 0.2.76 ($LITDATA076 first on PYTHONPATH)"
        second=0
        PYTHONPATH="$STREAMSCOPE_LITDATA076_DIR${PYTHONPATH:+:$PYTHONPATH}" \
            "$VENV/bin/python" -m pytest -n 2 --dist loadfile -q -m "interop and not heavy and not slow" "$@" || second=$?
        [ "$second" -eq 5 ] && second=0  # the selection held no interop test
        [ "$status" -ne 0 ] && exit "$status"
        exit "$second"
        ;;
    *)
        echo "usage: ./run.sh demo|test [args]" >&2
        exit 2
        ;;
esac
