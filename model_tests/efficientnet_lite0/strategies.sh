#!/bin/sh
# The table of issue 4: EfficientNet-Lite0 top-1 and agreement for each activation
# calibration strategy (per-channel symmetric weights, per-tensor asymmetric
# activations), then the tool's defaults (per-tensor symmetric weights and
# activations, `mean`). Calibrates once (work/lite0_stats.pt), then reuses it.
cd "$(dirname "$0")" || exit 1
sh run.sh --set statistic_file=work/lite0_stats.pt > /dev/null 2>&1   # export + statistics
row() {  # row LABEL NPUOPT-ARGS...
    label=$1; shift
    npuopt --cfg opt.cfg --set statistic_file=work/lite0_stats.pt --set output_dir=work/table "$@" \
        > work/table.log 2>&1 || { echo "| $label | failed: $(tail -n 1 work/table.log) |"; return; }
    "${PYTHON:-python3}" - "$label" <<'PY'
import json, sys
r = json.load(open("work/table/lite0_report.json"))
m = r["metrics"]
print(f"| {sys.argv[1]} | {m['float']['TopKMetric']:.3f} | {m['quant']['TopKMetric']:.3f} | "
      f"{100 * r['agreement']['_fc']:.1f}% |")
PY
}
echo "| activations: strategy | float top-1 | quant top-1 | agreement |"
echo "|---|---|---|---|"
for s in 99.999percentile mean extrema 99.99percentile 4std kld mse aciq_laplace; do
    row "per-tensor asymmetric: $s" --set calibration_strategy_for_activation=$s
done
row "defaults (per-tensor symmetric weights and activations, mean)" \
    --set quantize_method_for_weight=per_tensor_symmetric_restricted_range \
    --set quantize_method_for_activation=per_tensor_symmetric_full_range
