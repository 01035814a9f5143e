#!/usr/bin/env bash
# Deterministic host cost of one execution's data path: the instructions, data references and
# simulated cache misses inside `cayman_exec::execute` (every data-path word, inclusive) of
# `neuron-emu run NEFF`, counted by callgrind. The same binary and NEFF give the same counts
# whatever else the host is doing, so two builds can be compared where wall time is too noisy
# (docs/performance.md, "Deterministic host cost"). Instructions are not time: cache misses
# are simulated, not timed, and each iteration of a `rep movs`/`rep stos` counts as one.
#
# usage: scripts/datapath-cost.sh [--bin PATH] [--ll SIZE,ASSOC,LINE] [--scope data|device] NEFF...
#   --bin    the neuron-emu binary (default: target/release/neuron-emu)
#   --ll     the simulated last-level cache (default 524288,8,64: one core's 512 KiB L2)
#   --scope  data (default): inside `cayman_exec::execute`; device: the whole device thread
#            (`Device::run`: the data path plus DMA, decode, scheduling, semaphores)
set -euo pipefail
bin=target/release/neuron-emu
ll=524288,8,64
scope='neuron_devmodel::cayman_exec::execute'
while [[ $# -gt 0 ]]; do
    case "$1" in
        --bin) bin=$2; shift 2 ;;
        --ll) ll=$2; shift 2 ;;
        --scope)
            case "${2:-}" in
                data) scope='neuron_devmodel::cayman_exec::execute' ;;
                device) scope='neuron_devmodel::device::Device::run' ;;
                *) echo "datapath-cost: --scope takes data or device" >&2; exit 2 ;;
            esac
            shift 2 ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; break ;;
        -*) echo "datapath-cost: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
if [[ $# -eq 0 ]]; then
    echo "datapath-cost: no NEFF given (--help)" >&2
    exit 2
fi
command -v valgrind >/dev/null || { echo "datapath-cost: valgrind not found" >&2; exit 1; }
[[ -x "$bin" ]] || { echo "datapath-cost: $bin is not an executable (cargo build --release -p neuron-emu)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-28s %14s %14s %12s %12s %14s\n' neff instructions data_refs D1_misses LL_misses device_time
for neff in "$@"; do
    out="$tmp/cg.out"
    # Store traps off (valgrind cannot step over a trapped store), one host thread (the counts
    # do not depend on it), a long execution timeout (valgrind is ~50x slower).
    if ! NEURON_EMU_STORE_TRAPS=0 NEURON_EMU_THREADS=1 NEURON_RT_EXEC_TIMEOUT=3000 \
        valgrind --tool=callgrind --cache-sim=yes --LL="$ll" --callgrind-out-file="$out" \
        --toggle-collect="$scope" \
        "$bin" run "$neff" >"$tmp/log" 2>&1; then
        echo "datapath-cost: $neff failed:" >&2
        grep -v '^==' "$tmp/log" | tail -5 >&2
        exit 1
    fi
    # Events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
    read -r ir dr dw _ d1r d1w _ dlr dlw < <(grep '^summary:' "$out" | cut -d' ' -f2-)
    dev=$(grep -o 'device time [0-9.]* us' "$tmp/log" | cut -d' ' -f3)
    printf '%-28s %14d %14d %12d %12d %11s us\n' "$(basename "$neff" .neff)" \
        "$ir" $((dr + dw)) $((d1r + d1w)) $((dlr + dlw)) "$dev"
done
