# Shared by scripts/*: create or refresh the project's virtual environments.
# The main environment pins torch 2.13.0 (a CPU wheel on these machines): a looser pin would pull a
# multi-GB CUDA build.

PYTHON_BIN=${PYTHON_BIN:-$(command -v python3.11 || command -v python3)}
MAIN_TORCH=torch==2.13.0

# Hash of what decides an environment's contents, so a changed pyproject reinstalls it.
_env_key() { cat pyproject.toml scripts/lib/venv.sh "$@" 2>/dev/null | sha256sum | cut -c1-16; }

# Whether DIR holds a complete environment for the current key (the stamp is written last).
_venv_is_current() {
    [ -x "$1/bin/python" ] && [ "$(cat "$1/.stream-plugin-env" 2>/dev/null)" = "$(_env_key)" ]
}

# _ensure_venv DIR WHAT FIRST ARGS...: (re)create DIR unless its stamp matches the key; pip-install
# FIRST on its own when it is not empty (a pinned torch, so the resolver never picks another), then ARGS.
_ensure_venv() {
    local dir=$1 what=$2 first=$3 key
    shift 3
    key=$(_env_key)
    if _venv_is_current "$dir"; then
        return 0
    fi
    echo ">> creating $what in $dir" >&2
    "$PYTHON_BIN" -m venv "$dir"
    "$dir/bin/python" -m pip install --quiet --upgrade pip
    if [ -n "$first" ]; then
        "$dir/bin/python" -m pip install --quiet "$first"
    fi
    "$dir/bin/python" -m pip install --quiet "$@"
    echo "$key" > "$dir/.stream-plugin-env"
}

# The main environment has every extra the tests need (Composer's aside).
MAIN_EXTRAS=formats,lightning,gcs,azure,fsspec,spark,hf,hf-train,text,dev

ensure_main_venv() {
    _ensure_venv .venv "the main environment (torch 2.13.0 CPU, Lightning 2.6)" "" \
        "$MAIN_TORCH" -e ".[$MAIN_EXTRAS]"
    ensure_azurite
}

# The main job (scripts/main-job, examples/lightning) imports only torch, Lightning, its CLI's
# jsonargparse, PyYAML (a Lightning dependency) and stream_plugin's core: the lightning extra, beside the
# same torch. No Azurite, no Java. A current .venv has all of it (JOB_EXTRAS is part of MAIN_EXTRAS), so
# the job uses it; otherwise it builds .venv-job and leaves .venv alone. Sets JOB_VENV to the one used.
JOB_EXTRAS=lightning

# pip byte-compiles every module it installs, all of torch included: two thirds of the install's CPU
# time. .venv-job is installed with --no-compile, then byte-compiles what the job's two entry points
# import by importing them once (written even under PYTHONDONTWRITEBYTECODE=1, which would otherwise
# leave every process of the job compiling torch again). This also checks that the environment has what
# the job imports; on a failure the environment is unstamped, so the next run builds it again.
_JOB_IMPORTS="import sys; sys.dont_write_bytecode = False; sys.path.insert(0, 'examples/lightning'); import main_job, train"

ensure_job_venv() {
    if _venv_is_current .venv; then
        JOB_VENV=.venv
        return 0
    fi
    JOB_VENV=.venv-job
    if _venv_is_current "$JOB_VENV"; then
        return 0
    fi
    _ensure_venv "$JOB_VENV" "the main job's environment (torch 2.13.0 CPU, Lightning 2.6; no test tools)" "" \
        --no-compile "$MAIN_TORCH" -e ".[$JOB_EXTRAS]"
    "$JOB_VENV/bin/python" -c "$_JOB_IMPORTS" || { rm -f "$JOB_VENV/.stream-plugin-env"; return 1; }
}

# Azurite, Microsoft's Azure Storage emulator, for tests/storage (an npm package; Node 20 is on every
# machine). It goes into the gitignored .tools/azurite; the test fixture starts it on 127.0.0.1.
AZURITE_VERSION=3.37.0
AZURITE_DIR=.tools/azurite

ensure_azurite() {
    if [ "$(cat "$AZURITE_DIR/.stream-plugin-env" 2>/dev/null)" = "$AZURITE_VERSION" ] \
        && [ -x "$AZURITE_DIR/node_modules/.bin/azurite-blob" ]; then
        return 0
    fi
    echo ">> installing Azurite $AZURITE_VERSION in $AZURITE_DIR" >&2
    mkdir -p "$AZURITE_DIR"
    npm install --prefix "$AZURITE_DIR" --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION" >&2
    echo "$AZURITE_VERSION" > "$AZURITE_DIR/.stream-plugin-env"
}

# The peers environment for benchmarks only (never CI): MosaicML Streaming and litdata need a working
# torchvision, which imports only beside torch 2.14.1 + torchvision 0.29.1 (both lie on these machines).
PEERS_PINS=(torch==2.14.1 torchvision==0.29.1 mosaicml-streaming==0.13.0 litdata==0.2.76 matplotlib psutil
    sortedcollections==2.1.0 polars)  # sortedcollections: MosaicML's simulator (benchmarks/bench_simulate.py);
# polars: litdata's Parquet path (benchmarks/bench_parquet.py)

ensure_peers_venv() {
    _ensure_venv .venv-peers "the peers environment (torch 2.14.1, MosaicML Streaming 0.13, litdata 0.2.76)" "" \
        "${PEERS_PINS[@]}" -e ".[formats,parquet,dev]"
}

# The Composer environment for tests/composer: Composer 0.32.1 (mosaicml, its last release) pins
# torch>=2.6,<2.7.1, which the main environment's torch 2.13.0 breaks, so it lives in its own venv.
# torch 2.7.0 is installed first on its own so that resolving the composer extra changes nothing.
# llm-foundry 0.22.0 (the llmfoundry extra) lives here too: it pins the same torch and Composer.
COMPOSER_TORCH=torch==2.7.0

ensure_composer_venv() {
    _ensure_venv .venv-composer "the Composer environment (torch 2.7.0, Composer 0.32.1)" "$COMPOSER_TORCH" \
        "$COMPOSER_TORCH" -e ".[composer,llmfoundry,text,formats,dev]"
}

# PySpark 4 (tests/converters) runs on Java 17 or newer. Where `java` is missing or older, install
# Debian's headless JDK 17 when we may (root with apt-get), else stop with what to install.
_java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }

ensure_java() {
    if command -v java >/dev/null 2>&1 && [ "$(_java_major)" -ge 17 ] 2>/dev/null; then
        return 0
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo ">> installing Java 17 for Spark (apt-get install openjdk-17-jre-headless)" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless >/dev/null
        return 0
    fi
    echo "expected Java 17 or newer on PATH for the Spark tests, found $(command -v java || echo none)" \
        "$(_java_major 2>/dev/null); install a JDK 17 (apt-get install openjdk-17-jre-headless) and re-run" >&2
    return 1
}
