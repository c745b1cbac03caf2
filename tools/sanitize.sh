#!/usr/bin/env bash
# Build the C data path with AddressSanitizer and UBSan in a scratch copy and
# run the tests that exercise it (wire format, engine, property tests).
#   bash tools/sanitize.sh [PYTHON]
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="$(realpath "${1:-$here/.venv/bin/python}")"
work="$(mktemp -d /tmp/mrc-asan.XXXXXX)"
trap 'rm -rf "$work"' EXIT
cp -r "$here/csrc" "$here/mrc" "$here/tests" "$here/docs" "$here/bench" "$here/tools" "$here/pyproject.toml" "$work/"
find "$work/mrc" -name '_dp*' -delete
cd "$work"
MRC_CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
MRC_LDFLAGS="-fsanitize=address,undefined" "$py" csrc/build_dp.py >/dev/null
asan="$(gcc -print-file-name=libasan.so)"
export LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
# the scratch copy must be the one imported, not the installed package
"$py" -c 'import mrc._dp, sys; f = mrc._dp.__file__; print("sanitized build:", f); sys.exit(not f.startswith(sys.argv[1]))' "$work"
"$py" -m pytest -q -p no:cacheprovider tests/unit/test_wire.py tests/dp tests/property
