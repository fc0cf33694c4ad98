#!/bin/sh
# Print the path of a Python >= 3.12 interpreter (for the Django 6.x run), or nothing.
for cand in python3.13 python3.12 "$HOME/.pyenv/versions/3.13.0/bin/python3" \
            "$HOME/.pyenv/versions/3.12.1/bin/python3"; do
  p=$(command -v "$cand" 2>/dev/null) || continue
  if "$p" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
    echo "$p"; exit 0
  fi
done
for p in "$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3; do
  [ -x "$p" ] && { echo "$p"; exit 0; }
done
exit 0
