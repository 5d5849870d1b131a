"""What the mixed-precision search (precision_search.py) writes: `<model>_mixed_precision.json`
(the front, each point with its per-layer formats as an opt_config, its predicted and
measured output error and its sizes; every layer's sensitivities) and
`<model>_mixed_precision.png` (the per-layer sensitivities and the front), so that a user
sees where the bits go and can feed any point back as the cfg's opt_config."""
import json
import os
from typing import Dict

ERROR_MEANING = ("relative output error: squared difference of the quantized graph's (dequantized) outputs from "
                 "the float graph's over their squares, summed over the search's calibration samples and averaged "
                 "over the graph's outputs; predicted: the top point's measured error plus each layer's increase")


def point_config(search, choice: Dict[str, int], user_config: dict) -> dict:
    """The opt_config of a point: the settings its formats change, over the cfg's own opt_config entries."""
    out = {layer: dict(entry) for layer, entry in user_config.items()}
    for layer, i in choice.items():
        option, base = search.options[layer][i], search.options[layer][0]
        changed = {k: v for k, v in option.values.items() if str(v) != str(base.values.get(k))}
        if changed:
            out[layer] = {**out.get(layer, {}), **{k: _plain(v) for k, v in changed.items()}}
    return out


def _plain(value):
    return value if isinstance(value, (bool, int, float, str)) else str(value)


def write_front(path: str, search, front, summary: dict, opt_config_path: str) -> None:
    user_config = {}
    if opt_config_path and os.path.isfile(opt_config_path):
        with open(opt_config_path, encoding="utf-8") as f:
            user_config = json.load(f)  # read and checked by the plan already
    points = [{"opt_config": point_config(search, p.choice, user_config), "predicted_error": p.predicted,
               "measured_error": p.measured, **p.sizes.as_dict(),
               "formats": {name: search.options[name][i].name for name, i in p.choice.items()
                           if search.options[name][i].name != search.options[name][0].name}}
              for p in front]
    sensitivity = {name: {opt.name: search.increase[name][i] for i, opt in enumerate(opts)}
                   for name, opts in search.options.items()}
    data = {"error": ERROR_MEANING, **summary, "top_error": search.top_error,
            "parameters": search.costs.total_params, "points": points, "sensitivity": sensitivity}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)


def write_plot(path: str, search, front, chosen) -> None:
    """Left: each layer's error increase per format below its top (ringed: the chosen one);
    right: the front, predicted and measured error against average weight bits."""
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    names = list(search.options)
    lower = [(k, n, i, o.name) for k, n in enumerate(names) for i, o in enumerate(search.options[n])
             if i != search.top[n]]
    positive = [search.increase[n][i] for _, n, i, _ in lower if search.increase[n][i] > 0]
    floor = min(positive) / 10 if positive else 1e-12  # increases at or below 0 are drawn here
    fig, (left, right) = plt.subplots(1, 2, figsize=(16, 6))
    for kind in sorted({kind for *_, kind in lower}):
        picked = [(k, max(search.increase[n][i], floor)) for k, n, i, c in lower if c == kind]
        left.plot([k for k, _ in picked], [y for _, y in picked], "o", markersize=4, label=kind)
    ringed = [(k, max(search.increase[n][i], floor)) for k, n, i, _ in lower if chosen.choice[n] == i]
    left.plot([k for k, _ in ringed], [y for _, y in ringed], "o", markersize=9, markerfacecolor="none",
              markeredgecolor="black", label="chosen")
    left.set_yscale("log")
    left.set_xticks(range(len(names)))
    left.set_xticklabels(names, rotation=90, fontsize=5)
    left.set_ylabel("output error increase over the top")
    left.set_title("per-layer sensitivity (unringed layers keep their top format)")
    left.legend(fontsize=7)
    bits = [p.sizes.average_weight_bits for p in front]
    right.plot(bits, [max(p.predicted, 1e-12) for p in front], ".-", label="predicted")
    measured = [p for p in front if p.measured is not None]
    right.plot([p.sizes.average_weight_bits for p in measured], [max(p.measured, 1e-12) for p in measured], "x",
               label="measured")
    right.plot([chosen.sizes.average_weight_bits], [max(chosen.predicted, 1e-12)], "*", markersize=14,
               label="chosen")
    if "average_weight_bits" in search.budgets:
        right.axvline(search.budgets["average_weight_bits"], linestyle="--", color="grey", label="budget")
    right.set_yscale("log")
    right.set_xlabel("average weight bits")
    right.set_ylabel("relative output error")
    right.set_title("front")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
