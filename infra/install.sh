# Sourced by infra/setup.sh and infra/vllm-cpu/setup.sh: how a virtual environment gets packages.
#
#   venv_install VENV PIP_INSTALL_ARGS...
#
# Through uv (infra/uv_pip.py: pip's own configuration, pip's choice of versions, the .pyc files
# written at install as pip writes them), several times faster than pip on a fresh environment;
# through pip where uv cannot be had or fails, or where SWE_RLVR_INSTALLER=pip asks for it. uv
# itself goes into VENV on first use, from the same indexes.
UV_PIN="uv==0.13.9"
INSTALL_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

venv_installer() {  # venv_installer VENV: sets INSTALLER to uv or pip, once per VENV
  [ "${INSTALLER_VENV:-}" = "$1" ] && return 0
  INSTALLER_VENV=$1
  INSTALLER=pip
  if [ "${SWE_RLVR_INSTALLER:-uv}" != pip ] && { [ -x "$1/bin/uv" ] || "$1/bin/pip" install -q "$UV_PIN" 2>/dev/null; }; then
    INSTALLER=uv
  fi
}

venv_install() {
  local venv=$1
  shift
  venv_installer "$venv"
  if [ "$INSTALLER" = uv ]; then
    "$venv/bin/python" "$INSTALL_DIR/uv_pip.py" -q "$@" && return 0
    echo "[install] uv could not install into $venv ($*); pip tries instead" >&2
  fi
  "$venv/bin/pip" install -q "$@"
}
