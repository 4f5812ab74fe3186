# Shared by scripts/*: create or refresh the project's virtual environments.
# The main environment pins torch 2.13.0 (a CPU wheel on these machines): a looser pin would pull a
# multi-GB CUDA build.

PYTHON_BIN=${PYTHON_BIN:-$(command -v python3.11 || command -v python3)}
MAIN_TORCH=torch==2.13.0

# Hash of what decides an environment's contents, so a changed pyproject reinstalls it.
_env_key() { cat pyproject.toml scripts/lib/venv.sh "$@" 2>/dev/null | sha256sum | cut -c1-16; }

ensure_main_venv() {
    local key stamp=.venv/.stream-plugin-env
    key=$(_env_key)
    if [ -x .venv/bin/python ] && [ "$(cat "$stamp" 2>/dev/null)" = "$key" ]; then
        return 0
    fi
    echo ">> creating the main environment in .venv (torch 2.13.0 CPU, Lightning 2.6)" >&2
    "$PYTHON_BIN" -m venv .venv
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet "$MAIN_TORCH" -e ".[formats,lightning,dev]"
    echo "$key" > "$stamp"
}

# The peers environment for benchmarks only (never CI): MosaicML Streaming and litdata need a working
# torchvision, which imports only beside torch 2.14.1 + torchvision 0.29.1 (both lie on these machines).
PEERS_PINS=(torch==2.14.1 torchvision==0.29.1 mosaicml-streaming==0.13.0 litdata==0.2.76 matplotlib psutil)

ensure_peers_venv() {
    local key stamp=.venv-peers/.stream-plugin-env
    key=$(_env_key)
    if [ -x .venv-peers/bin/python ] && [ "$(cat "$stamp" 2>/dev/null)" = "$key" ]; then
        return 0
    fi
    echo ">> creating the peers environment in .venv-peers (torch 2.14.1, MosaicML Streaming 0.13, litdata 0.2.76)" >&2
    "$PYTHON_BIN" -m venv .venv-peers
    .venv-peers/bin/python -m pip install --quiet --upgrade pip
    .venv-peers/bin/python -m pip install --quiet "${PEERS_PINS[@]}" -e ".[formats,dev]"
    echo "$key" > "$stamp"
}

# The Composer environment for tests/composer: Composer 0.32.1 (mosaicml, its last release) pins
# torch>=2.6,<2.7.1, which the main environment's torch 2.13.0 breaks, so it lives in its own venv.
# torch 2.7.0 is installed first on its own so that resolving the composer extra changes nothing.
COMPOSER_TORCH=torch==2.7.0

ensure_composer_venv() {
    local key stamp=.venv-composer/.stream-plugin-env
    key=$(_env_key)
    if [ -x .venv-composer/bin/python ] && [ "$(cat "$stamp" 2>/dev/null)" = "$key" ]; then
        return 0
    fi
    echo ">> creating the Composer environment in .venv-composer (torch 2.7.0, Composer 0.32.1)" >&2
    "$PYTHON_BIN" -m venv .venv-composer
    .venv-composer/bin/python -m pip install --quiet --upgrade pip
    .venv-composer/bin/python -m pip install --quiet "$COMPOSER_TORCH"
    .venv-composer/bin/python -m pip install --quiet "$COMPOSER_TORCH" -e ".[composer,formats,dev]"
    echo "$key" > "$stamp"
}
