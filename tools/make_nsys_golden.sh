#!/usr/bin/env bash
# Regenerate the golden CSVs that NVIDIA's own `nsys stats` / `nsys analyze`
# print for the real exports, so tests can compare our totals against NVIDIA's.
#
# usage: tools/make_nsys_golden.sh [PROFILES_DIR] [STATS_OUT_DIR] [ANALYZE_OUT_DIR]
#   PROFILES_DIR     directory of real *.sqlite exports (read only; never modified)
#                    default: the real-profiles directory the tests read (see tests/conftest.py REAL_DIR)
#   STATS_OUT_DIR    default: tests/golden/nsys_stats
#   ANALYZE_OUT_DIR  default: tests/golden/nsys_analyze
# env:
#   NSYS             nsys binary (default: `nsys` on PATH). Generated with 2022.4.2
#                    from Debian bookworm non-free (`apt-get install nsight-systems`);
#                    later versions renamed the reports (cudaapisum -> cuda_api_sum ...).
#   ANALYZE_FILES    space-separated file-name prefixes to run `nsys analyze` on
#
# Every export is copied into a mktemp dir first (nsys may write next to its
# input); the copies are removed on exit. CSVs are kept byte-for-byte as nsys
# wrote them. A report nsys skipped (e.g. "does not contain CUDA kernel data")
# gets no CSV; every (file, report) outcome is listed in <out>/status.tsv.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

default_profiles() {
    local d
    for d in "$REPO/shared/real-profiles" "$REPO/../shared/real-profiles"; do
        if [ -d "$d" ]; then (cd "$d" && pwd); return; fi
    done
    echo "$REPO/../shared/real-profiles"
}

PROFILES=${1:-$(default_profiles)}
STATS_OUT=${2:-$REPO/tests/golden/nsys_stats}
ANALYZE_OUT=${3:-$REPO/tests/golden/nsys_analyze}
NSYS=${NSYS:-nsys}
NSYS=$(command -v "$NSYS" || true)
ANALYZE_FILES=${ANALYZE_FILES:-"kmcho2019__Rodinia_Gaussian PolPuigPuy RajaATAli ayanamesu"}

# report[:format-args]=saved-name; default csv writes sizes in MB (1000^2, 3 decimals),
# so gpumemsizesum is also saved with mem=B (exact bytes).
REPORTS=(cudaapisum=cudaapisum gpukernsum=gpukernsum gpumemtimesum=gpumemtimesum
         gpumemsizesum=gpumemsizesum gpumemsizesum:mem=B=gpumemsizesum_bytes)
RULES=(cuda-async-memcpy cuda-sync-memcpy cuda-sync-memset cuda-sync-api gpu-starv gpu-low-util dx12-mem-op)

if [ -z "$NSYS" ] || ! [ -x "$NSYS" ]; then
    echo "error: nsys not found; put it on PATH or set NSYS=/path/to/nsys" >&2
    echo "  (Debian bookworm: enable 'non-free', then apt-get install nsight-systems)" >&2
    exit 2
fi
if ! [ -d "$PROFILES" ]; then
    echo "error: profiles directory not found: $PROFILES" >&2
    exit 2
fi
shopt -s nullglob
inputs=("$PROFILES"/*.sqlite)
if [ ${#inputs[@]} -eq 0 ]; then
    echo "error: no *.sqlite in $PROFILES" >&2
    exit 2
fi
mkdir -p "$STATS_OUT" "$ANALYZE_OUT"
STATS_OUT=$(cd "$STATS_OUT" && pwd)
ANALYZE_OUT=$(cd "$ANALYZE_OUT" && pwd)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

echo "nsys: $NSYS ($("$NSYS" --version))"

# run_one MODE(stats|analyze) NAME(report or rule) STEM DEST_DIR [FORMAT_ARGS] [SAVE_AS]
# Prints "status<TAB>detail"; copies the CSV to DEST_DIR/SAVE_AS.csv when nsys produced rows.
run_one() {
    local mode=$1 name=$2 stem=$3 dest=$4 fargs=${5:-} save=${6:-$2} flag out log csv msg
    if [ "$mode" = stats ]; then flag=--report; else flag=--rule; fi
    out="$WORK/out_${mode}_${save}"
    log="$WORK/log"
    rm -rf "$out"
    mkdir -p "$out"
    # Run from $WORK with a relative input name so nsys messages carry no temp path.
    (cd "$WORK" && "$NSYS" "$mode" "$flag" "$name" --format "csv${fargs:+:$fargs}" \
        --output "$out/r" "$stem.sqlite") >"$log" 2>&1 || true
    csv="$out/r_$name.csv"
    msg=$(grep -o 'SKIPPED: .*' "$log" | head -n1 | sed 's/^SKIPPED: //' || true)
    if [ -s "$csv" ] && grep -q 'PROCESSED' "$log"; then
        cp "$csv" "$dest/$save.csv"
        printf 'ok\t%s data rows\n' "$(($(wc -l <"$csv") - 1))"
    elif [ -n "$msg" ]; then
        printf 'skipped\t%s\n' "$msg"
    elif [ -f "$csv" ] && ! [ -s "$csv" ] && ! grep -q 'ERROR' "$log"; then
        # nsys wrote an empty file and no message: the query ran and returned no rows
        # (nsys analyze: "There were no problems detected").
        printf 'no_rows\t\n'
    else
        printf 'error\t%s\n' "$(grep -v '^[[:space:]]*$' "$log" | tail -n1 | tr '\t' ' ')"
    fi
}

printf 'file\treport\tstatus\tdetail\n' >"$STATS_OUT/status.tsv"
printf 'file\trule\tstatus\tdetail\n' >"$ANALYZE_OUT/status.tsv"

for src in "${inputs[@]}"; do
    stem=$(basename "$src" .sqlite)
    rm -f "$WORK"/*.sqlite
    cp "$src" "$WORK/$stem.sqlite"
    chmod u+w "$WORK/$stem.sqlite"

    dest="$STATS_OUT/$stem"
    mkdir -p "$dest"
    rm -f "$dest"/*.csv
    for spec in "${REPORTS[@]}"; do
        save=${spec##*=}
        r=${spec%=*}
        fargs=
        case "$r" in *:*) fargs=${r#*:}; r=${r%%:*} ;; esac
        res=$(run_one stats "$r" "$stem" "$dest" "$fargs" "$save")
        printf '%s\t%s\t%s\n' "$stem" "$save" "$res" >>"$STATS_OUT/status.tsv"
        printf 'stats   %-20s %s  %s\n' "$save" "${res%%$'\t'*}" "$stem"
    done
    rmdir "$dest" 2>/dev/null || true

    for prefix in $ANALYZE_FILES; do
        case "$stem" in "$prefix"*) ;; *) continue ;; esac
        dest="$ANALYZE_OUT/$stem"
        mkdir -p "$dest"
        rm -f "$dest"/*.csv
        for rule in "${RULES[@]}"; do
            res=$(run_one analyze "$rule" "$stem" "$dest")
            printf '%s\t%s\t%s\n' "$stem" "$rule" "$res" >>"$ANALYZE_OUT/status.tsv"
            printf 'analyze %-17s %s  %s\n' "$rule" "${res%%$'\t'*}" "$stem"
        done
        rmdir "$dest" 2>/dev/null || true
    done
done

echo "wrote $STATS_OUT and $ANALYZE_OUT (see status.tsv in each)"
