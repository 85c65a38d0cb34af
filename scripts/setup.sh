#!/usr/bin/env bash
# Create .venv and install ner with every extra and its dev tools, at the exact versions of
# constraints.txt (pip install -c constraints.txt -e ".[all,dev]").
#
#   bash scripts/setup.sh           # .venv, pinned
#   bash scripts/setup.sh --lock    # rewrite constraints.txt: pyproject.toml's ranges resolved
#                                   # afresh in a throwaway venv (torch held to its pin)
#
# torch goes first, alone, so that its build is chosen, not stumbled on: on Linux a plain `torch`
# from PyPI is the multi-GB CUDA build. TORCH_INDEX chooses where the pinned release comes from:
#   auto (default)  the CPU build: from pip's own configuration where that already offers one (a
#                   `+cpu` wheel, e.g. from a local wheel folder), else, on Linux, from PyTorch's
#                   CPU index https://download.pytorch.org/whl/cpu; elsewhere PyPI's is the CPU one
#   cpu             PyTorch's CPU index
#   URL             that index, e.g. TORCH_INDEX=https://download.pytorch.org/whl/cu128 (CUDA 12.8)
# The index serves torch alone (--no-deps): its dependencies come, pinned, with the rest. A torch
# already in .venv at the pinned release is kept, whatever its build: to switch, rm -rf .venv.
set -euo pipefail
cd "$(dirname "$0")/.."
CONSTRAINTS=constraints.txt
CPU_INDEX=https://download.pytorch.org/whl/cpu
case "${1:-}" in
  "") lock=false ;;
  --lock) lock=true ;;
  *) echo "usage: bash scripts/setup.sh [--lock]" >&2; exit 2 ;;
esac
torch_pin=$(grep -E '^torch==' "$CONSTRAINTS")  # torch==X.Y.Z, no local version tag

if $lock; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  venv=$tmp/venv
  pins=$tmp/torch.txt  # only torch is held; everything else resolves afresh
  echo "$torch_pin" >"$pins"
else
  venv=.venv
  pins=$CONSTRAINTS
fi
py=$venv/bin/python
python3 -m venv "$venv"
"$py" -m pip install --quiet --upgrade pip

installed=$("$py" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
if [ "${installed%%+*}" != "${torch_pin#torch==}" ]; then
  index=()
  case "${TORCH_INDEX:-auto}" in
    auto)
      if [ "$(uname -s)" = Linux ]; then
        # the version pip's own configuration would install: 2.13.0+cpu, or a bare (CUDA) 2.13.0
        offered=$("$py" -m pip install --quiet --dry-run --no-deps --ignore-installed --report - \
          "$torch_pin" 2>/dev/null | "$py" -c \
          'import json, sys; print(json.load(sys.stdin)["install"][0]["metadata"]["version"])' \
          2>/dev/null || true)
        [[ "$offered" == *+cpu ]] || index=(--index-url "$CPU_INDEX")
      fi ;;
    cpu) index=(--index-url "$CPU_INDEX") ;;
    *) index=(--index-url "$TORCH_INDEX") ;;
  esac
  "$py" -m pip install --quiet --no-deps ${index[@]+"${index[@]}"} "$torch_pin"
fi
"$py" -m pip install --quiet -c "$pins" -e ".[all,dev]"

if $lock; then
  "$py" -m pip check
  {
    awk '!/^(#|$)/ { exit } { print }' "$CONSTRAINTS"  # the header comment, kept
    "$py" -m pip freeze --exclude-editable | sed -E 's/^(torch==[^+]+)\+.*/\1/'
  } >"$tmp/constraints.txt"
  mv "$tmp/constraints.txt" "$CONSTRAINTS"
  echo "rewrote $CONSTRAINTS; to install it: rm -rf .venv && bash scripts/setup.sh"
fi
