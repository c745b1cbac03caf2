#!/usr/bin/env bash
# Fuzz the data path: build the libFuzzer harnesses of csrc/fuzz with clang,
# AddressSanitizer and UBSan, record their seed corpus from the in-memory
# link (tools/fuzz_seeds.py), and run each harness for SECONDS.
#
#   bash tools/fuzz.sh 20                     # each harness 20 s (what CI runs)
#   bash tools/fuzz.sh 600 responder          # one harness, 10 minutes
#   bash tools/fuzz.sh 0 requester FILE...    # replay inputs (a crash-* file) and exit
#
# Harnesses: parse (parse, build, parse round trip), responder (arbitrary
# packets against one region between guard bytes), requester (arbitrary
# control packets against writes in flight: exactly-once, in-order
# completion), secured (a responder whose QP is secured, fed packets sealed
# under its peer's key and not), setup (a connection-setup message: the JSON parser, the
# canonical text a key's proof covers, the peer's "info"). Exit status: 0 when nothing was found; 1 when a harness
# crashed or broke an invariant (its input is left as
# $MRC_FUZZ_DIR/<harness>/crash-*, replay it as above); 2 on a usage or
# build error. Needs clang (apt-get install clang) and the built package
# (.venv, tools/setup.sh) for the seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
[ "$#" -gt 0 ] && shift
case "$secs" in ''|*[!0-9]*) echo "tools/fuzz.sh: SECONDS must be a whole number, not '$secs'" >&2; exit 2 ;; esac
all="parse responder requester setup secured buffers"
which="${1:-$all}"
[ "$#" -gt 0 ] && shift
for h in $which; do
    case " $all " in *" $h "*) ;; *) echo "tools/fuzz.sh: no harness '$h' (use: $all)" >&2; exit 2 ;; esac
done
py="${PYTHON:-.venv/bin/python}"
cc="${CLANG:-clang}"
command -v "$cc" >/dev/null || { echo "tools/fuzz.sh: no $cc: apt-get install clang" >&2; exit 2; }
out="${MRC_FUZZ_DIR:-build/fuzz}"
mkdir -p "$out"

# the data path's sources, as the Python build lists them (csrc/build_dp.py)
srcs=$("$py" - <<'PY'
import sys
sys.path.insert(0, "csrc")
from build_dp import SOURCES
print(" ".join("csrc/" + s for s in SOURCES if not s.startswith("bench/")))
PY
)
flags=(-g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -Icsrc/include -Icsrc -Wno-unused-parameter)
for h in $which; do
    if [ ! -x "$out/fuzz_$h" ] || [ -n "$(find csrc -name '*.[ch]' -newer "$out/fuzz_$h" | head -1)" ]; then
        echo "== build fuzz_$h"
        # shellcheck disable=SC2086
        "$cc" "${flags[@]}" "csrc/fuzz/fuzz_$h.c" $srcs -o "$out/fuzz_$h" -lpthread -lcrypto || exit 2
    fi
done

if [ "$secs" = 0 ]; then  # replay the files given
    [ "$#" -gt 0 ] || { echo "tools/fuzz.sh: 0 seconds replays inputs: name the files after the harness" >&2; exit 2; }
    for h in $which; do "$out/fuzz_$h" "$@" || exit 1; done
    exit 0
fi

if [ ! -d "$out/seeds/buffers" ]; then  # the newest harness: older corpora lack it
    echo "== seed corpus from the in-memory link"
    "$py" tools/fuzz_seeds.py "$out/seeds" || exit 2
fi

found=0
for h in $which; do
    mkdir -p "$out/corpus/$h" "$out/$h"
    echo "== fuzz_$h for $secs s"
    # -timeout: one input may take 10 s at most (a hang is a finding too)
    if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$out/fuzz_$h" -max_total_time="$secs" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
            -artifact_prefix="$out/$h/" "$out/corpus/$h" "$out/seeds/$h" > "$out/$h.log" 2>&1; then
        found=1
        echo "!! fuzz_$h found a problem: tail of $out/$h.log" >&2
        tail -40 "$out/$h.log" >&2
        ls "$out/$h"/crash-* "$out/$h"/timeout-* "$out/$h"/leak-* 2>/dev/null >&2 || true
    else
        grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$out/$h.log" | tr '\n' ' '
        echo
    fi
done
exit "$found"
