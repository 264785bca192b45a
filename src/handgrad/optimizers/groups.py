"""Parameter groups: per-group hyper-parameters, as ``torch.optim``'s ``param_groups``.

A group is ``{"params": names, option: value, ...}``: ``names`` a list of parameter names
(or a dict / ``NamedArrays`` whose keys are the names, e.g. a subset of
``model.named_parameters()``), the options any of the optimizer's hyper-parameters
(``lr``, ``weight_decay``, ``betas``, ...). An option a group leaves out is the
optimizer's. A group's ``lr`` follows the optimizer's learning rate as torch's schedulers
scale each group's initial rate: ``group lr * optimizer.lr / lr given at construction``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .._checks import describe

__all__ = ["param_groups"]


def _names(op, index, value):
    """The parameter names of group ``index``: a list/tuple of str or a dict's keys."""
    if isinstance(value, Mapping):
        value = list(value)
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(
            isinstance(n, str) for n in value):
        raise TypeError(f"{op}: param_groups[{index}]['params'] must be a list of parameter "
                        f"names or a dict name -> array (e.g. a subset of "
                        f"model.named_parameters()); received {describe(value)}")
    return tuple(value)


def parse_groups(op, groups, options):
    """``[{"params": (names...), option: value, ...}]`` checked: groups are dicts with a
    ``params`` entry, options among ``options``, no name in two groups."""
    if not isinstance(groups, (list, tuple)) or not groups:
        raise TypeError(f"{op}: 'params' must be a non-empty list of parameter groups (dicts "
                        f"with a 'params' entry); received {describe(groups)}")
    parsed, owner = [], {}
    for index, group in enumerate(groups):
        if not isinstance(group, Mapping) or "params" not in group:
            raise TypeError(f"{op}: param_groups[{index}] must be a dict with a 'params' "
                            f"entry; received {describe(group)}")
        unknown = sorted(set(group) - {"params"} - set(options))
        if unknown:
            raise ValueError(f"{op}: param_groups[{index}] has unknown options {unknown}; "
                             f"expected some of {sorted(options)}")
        names = _names(op, index, group["params"])
        twice = sorted({n for n in names if n in owner or names.count(n) > 1})
        if twice:
            raise ValueError(f"{op}: parameters {twice} appear in more than one parameter "
                             f"group (or twice in param_groups[{index}])")
        owner.update(dict.fromkeys(names, index))
        parsed.append({"params": names, **{k: v for k, v in group.items() if k != "params"}})
    return parsed


def param_groups(params, no_decay=("b", "bias", "gamma", "beta"), **no_decay_options):
    """Two groups for the usual "no weight decay on biases and norms" recipe:
    ``[{"params": the others}, {"params": names ending in .<no_decay>, "weight_decay": 0.0,
    **no_decay_options}]``. ``params`` is a model (its ``named_parameters()``) or a dict
    name -> array; a name ends in ``x`` when it is ``x`` or ends with ``.x``."""
    if hasattr(params, "named_parameters"):
        params = params.named_parameters()
    if not isinstance(params, Mapping):
        raise TypeError(f"param_groups: 'params' must be a model or a dict name -> array; "
                        f"received {describe(params)}")
    if isinstance(no_decay, str) or not isinstance(no_decay, (list, tuple)) or not all(
            isinstance(s, str) for s in no_decay):
        raise TypeError(f"param_groups: 'no_decay' must be a tuple of parameter name "
                        f"endings; received {describe(no_decay)}")
    quiet = [n for n in params if n.rpartition(".")[2] in no_decay]
    return [{"params": [n for n in params if n not in quiet]},
            {"params": quiet, "weight_decay": 0.0, **no_decay_options}]


def groups_state(groups, base_lr):
    """The flat state-dict entries of ``groups``' options (none without groups)."""
    if not groups:
        return {}
    out = {"param_groups/base_lr": np.array(base_lr, dtype=np.float64)}
    for index, group in enumerate(groups):
        out[f"param_groups/{index}/size"] = np.array(len(group["params"]), dtype=np.int64)
        for key, value in group.items():
            if key != "params":
                out[f"param_groups/{index}/{key}"] = np.array(value)
    return out


def load_groups(op, state, groups, base_lr):
    """``(groups with the saved options, base lr, the other entries)`` from a state dict;
    the groups keep their parameters (as torch), their number and sizes must match."""
    if not isinstance(state, Mapping):
        return groups, base_lr, state
    saved = {k: v for k, v in state.items() if isinstance(k, str) and
             k.startswith("param_groups/")}
    rest = {k: v for k, v in state.items() if k not in saved}
    if not saved and not groups:
        return groups, base_lr, rest
    sizes = [len(g["params"]) for g in groups]
    found = [int(saved.get(f"param_groups/{i}/size", -1)) for i in range(len(sizes) + 1)]
    if not saved or found != [*sizes, -1] or "param_groups/base_lr" not in saved:
        raise ValueError(f"{op}: the state's parameter groups do not match this optimizer's "
                         f"{len(sizes)} groups of sizes {sizes}")
    new = [{"params": g["params"]} for g in groups]
    for key, value in saved.items():
        _, index, option = key.split("/", 2) if key.count("/") == 2 else (0, "", "")
        if index == "" and key != "param_groups/base_lr":
            raise ValueError(f"{op}: unexpected key {key!r}")
        if option and option != "size":
            new[int(index)][option] = np.asarray(value).tolist()
    return new, float(saved["param_groups/base_lr"]), rest
