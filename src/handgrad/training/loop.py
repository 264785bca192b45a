"""The training loop: compile, train_step, fit, evaluate, predict.

A NaN or infinite batch loss ends ``fit`` with a :class:`NonFiniteLossError` (a
``FloatingPointError``, like :class:`handgrad.inspect.AnomalyError`) that names the epoch
and the step; that step's update is not applied, so the weights are those from before it.
``fit(on_nonfinite=...)`` chooses: ``"raise"`` (the default), ``"stop"`` (end training
after that step, without its update, and say so on stderr) or ``"ignore"`` (train on, as
Keras does). Passing a :class:`~handgrad.training.TerminateOnNaN` callback leaves the
decision to it (the default becomes ``"ignore"``, Keras's behaviour).

``fit(..., distributed=True)`` trains data-parallel inside an MPI job (``mpiexec -n K``):
each process takes its share of every global batch and the result is the one-process
model up to the order of floating-point sums (:mod:`handgrad.distributed`,
:mod:`.parallel`). The epoch machinery lives in :mod:`.epochs`, ``predict`` and
``evaluate`` in :mod:`.evaluation`.

A model with several inputs or outputs takes lists or dicts of arrays (see
:mod:`handgrad.training.data`) and per-output losses, loss weights and metrics (see
:mod:`handgrad.training.objective`). A subclass may override :meth:`TrainingMixin.train_step`
(and :meth:`TrainingMixin.test_step`) with a step of its own; ``fit`` then hands it the
batches as given and its callbacks see the logs it returns.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar

from .. import optimizers
from .._checks import as_generator, choice, describe, is_int
from .._hyper import flag
from . import metrics as _metrics
from . import parallel, regularization
from .backup import back_up, resume
from .callbacks import History, TerminateOnNaN
from .data import (
    given_data,
    model_data,
)
from .epochs import HINT, NonFiniteLossError, Run, run_epoch
from .evaluation import EvaluationMixin, as_list
from .fit_data import fit_data
from .hooks import notify, prepare
from .objective import Objective
from .progress import check_verbose

METRICS = tuple(_metrics.METRICS)
NONFINITE = ("raise", "stop", "ignore")
accuracy = _metrics.accuracy


__all__ = ["METRICS", "NONFINITE", "NonFiniteLossError", "TrainingMixin", "accuracy"]


class TrainingMixin(EvaluationMixin):
    """Training methods for a model with forward/backward/named_parameters."""

    optimizer = None
    loss_fn = None
    loss_name = None
    loss_weights = None
    metrics: tuple = ()
    stop_training = False
    _objective = None  # an Objective, set by compile
    _on_nonfinite = "raise"
    releases_caches = True  # a new outermost training forward drops unconsumed caches
    takes_targets = True  # False: the model learns from x alone, and fit refuses a y
    fit_moved: ClassVar[dict] = {}  # old fit keyword -> where it went (fit's message names it)

    def train(self):
        """Training mode: ``forward`` keeps caches and dropout is active."""
        self.training = True
        return self

    def eval(self):
        """Inference mode: dropout off, batch-norm running statistics and (unless
        ``forward(x, grad=True)``) no caches."""
        self.training = False
        return self

    def compile(self, optimizer="adam", loss="cross_entropy", metrics=None,
                loss_weights=None):
        """Choose the optimizer (name or instance), the loss (a name of
        :data:`handgrad.losses.LOSSES`, Keras's names included, or a callable
        ``(pred, y) -> (loss, dpred)``) and the metrics (names of
        :data:`handgrad.training.metrics.METRICS`; logged under the name given, e.g. ``"acc"``;
        ``"accuracy"`` is chosen from the loss and refused where that is ambiguous, e.g. with
        mse; None: ``["accuracy"]`` for a cross-entropy loss, none for the others).
        handgrad's cross-entropies take logits: an output that comes from Softmax or
        Sigmoid is refused; Keras's names take probabilities unless ``from_logits=True``.

        With several outputs, ``loss`` and ``loss_weights`` are one value for every output,
        a list in output order or a dict keyed by ``model.output_names`` (an output left
        out, or None, has no loss and gets no gradient); ``metrics`` is one list for every
        output that has a loss, or a dict keyed by output names. The loss is
        ``sum_i loss_weights[i] * loss_i``; see :mod:`handgrad.training.objective` for the
        logged keys. ``loss=None`` compiles only the optimizer (no metrics), for a custom
        ``train_step``; :meth:`compile_config` gives the arguments back.
        """
        objective = None if loss is None else Objective(self, loss, loss_weights, metrics)
        self.optimizer = optimizers.get(optimizer)
        self._objective = objective
        config = self.compile_config()
        self.metrics, self.loss_weights = config["metrics"], config["loss_weights"]
        specs = {} if objective is None else objective.loss_specs
        fns = {key: objective.losses[key] for key in specs}
        names = {key: spec if isinstance(spec, str) else getattr(spec, "__name__", "loss")
                 for key, spec in specs.items()}
        multi = objective is not None and objective.multi
        self.loss_fn = fns if multi else next(iter(fns.values()), None)
        self.loss_name = names if multi else next(iter(names.values()), None)
        return self

    def compile_config(self) -> dict:
        """``{"loss", "metrics", "loss_weights"}`` as ``compile`` takes them again (dicts
        keyed by output name for several outputs; losses as given: names or callables)."""
        self._require_compiled("compile_config", need_loss=False)
        if self._objective is None:
            return {"loss": None, "metrics": (), "loss_weights": None}
        return self._objective.config()

    def _require_compiled(self, what, need_loss=True):
        if self.optimizer is None:
            raise RuntimeError(f"{what}: call model.compile(optimizer, loss) first")
        if need_loss and self._objective is None:
            raise RuntimeError(f"{what}: the model was compiled without a loss (loss=None); "
                               f"compile it with a loss, or override train_step and "
                               f"test_step")

    def _custom(self, method) -> bool:
        """Whether ``train_step``/``test_step`` is a model's own (subclass or instance)."""
        return method in vars(self) or getattr(type(self), method) is not \
            getattr(TrainingMixin, method)

    def _step_logs(self, x, y, training, sample_weight=None):
        """Forward, then the objective (``sample_weight`` (B,) or None):
        ``(logs, output gradients in the model's form)``."""
        single = getattr(self, "single_output", True)
        regularization.reset(self)
        preds = as_list(self.forward(x, training=training), single)
        names = self._objective.names
        if isinstance(y, dict) and getattr(self, "output_names", None):
            ys = [y.get(name) for name in names]
        else:
            ys = as_list(y, single)
        logs, dpreds = self._objective(preds, ys, gradients=training,
                                       sample_weight=sample_weight)
        logs["loss"] += regularization.penalty(self)  # the regularizers' (Keras logs them)
        return logs, dpreds[0] if single else dpreds

    def train_step(self, x, y, sample_weight=None):
        """One optimizer step on a batch: zero grads, forward, loss, backward, update.
        Returns the batch's logs ({"loss": ..., "accuracy": ...}); ``sample_weight`` (B,)
        weighs the examples' losses (:mod:`handgrad.training.weights`).

        A NaN or infinite loss raises :class:`NonFiniteLossError` before the backward
        pass: the weights and the optimizer are left as they were.

        **Your own step.** Override ``train_step(self, x, y) -> dict`` in a subclass of
        ``handgrad.Model`` or ``Sequential`` to train differently (a GAN's critic and
        generator steps, a VAE's extra loss): run as many forwards, backwards and optimizer
        steps as it needs, and return a dict of floats. ``fit`` slices ``x`` and ``y``
        (arrays, or lists or dicts of arrays, same number of examples; ``y`` may be None)
        into batches with the same indices and hands them over as given; it averages the
        returned logs over each epoch (weighted by batch size), shows them in the progress
        bar, records them in ``History`` and hands them to callbacks (``EarlyStopping`` may
        monitor any key). A ``"loss"`` key, if returned, is checked for NaN after the step.
        ``fit`` then needs no ``compile``; the step may use optimizers of its own (e.g. one
        per sub-model), and ``self.optimizer``, if compiled (``compile(opt, loss=None)``),
        has its ``lr`` logged. Validation data go through :meth:`test_step`, which needs a
        compiled loss unless it is overridden too.
        """
        self._require_compiled("train_step")
        self.zero_grad()
        logs, dpred = self._step_logs(x, y, training=True, sample_weight=sample_weight)
        if self._backward_needed(logs, dpred):
            self.backward(dpred, input_grad=False)  # the data's gradient is not read
            self._apply_gradients()
        return logs

    def check_loss(self, logs, key="loss", op="train_step"):
        """For a step of your own, before its update: a NaN or infinite ``logs[key]``
        raises :class:`NonFiniteLossError` (carrying ``logs`` with ``"loss"`` set to that
        value), so that the update is not applied and ``fit``'s ``on_nonfinite`` decides
        (raise, stop, or go on); under ``fit(on_nonfinite="ignore")`` it lets the step
        train on, as Keras does. ``op`` starts the message."""
        value = logs[key]
        if self._on_nonfinite == "ignore" or math.isfinite(value):
            return
        raise NonFiniteLossError(f"{op}: the {key} is {value}; the update was not applied; "
                                 f"{HINT}", {**logs, "loss": value})

    def _backward_needed(self, logs, dpred) -> bool:
        """After a training forward: a NaN or infinite loss raises
        :class:`NonFiniteLossError` (unless ignored, see :meth:`check_loss`) before
        anything is updated; False when no output has a gradient. The caches are cleared
        when no backward follows."""
        try:
            self.check_loss(logs)
        except NonFiniteLossError:
            self.clear_caches()
            raise
        if dpred is None or (isinstance(dpred, list) and all(g is None for g in dpred)):
            self.clear_caches()  # no output has a gradient: nothing to learn from
            return False
        return True

    def _apply_gradients(self):
        """One optimizer step on the trainable parameters with their gradients (the
        regularizers' penalty gradients added first)."""
        regularization.add_gradients(self)
        self.optimizer.step(self.named_parameters(trainable_only=True),
                            self.named_gradients(trainable_only=True))

    def test_step(self, x, y, sample_weight=None):
        """The logs of one batch in inference mode (loss and metrics, no update); used by
        ``evaluate`` and for ``fit``'s validation data. May be overridden like
        :meth:`train_step`."""
        self._require_compiled("evaluate")
        return self._step_logs(x, y, training=False, sample_weight=sample_weight)[0]

    def _data(self, op, x, y, step, *, need_y=True, allow_empty=False):
        """``(x, y)`` checked: in the model's form for the built-in step, or as given
        (arrays, lists or dicts of arrays of one length) for a custom one."""
        if not self._custom(step):
            return model_data(op, self, x, y, objective=self._objective, need_y=need_y,
                              allow_empty=allow_empty)
        x, y = given_data(op, x, y, allow_empty=allow_empty)
        return self.check_data(op, x, y, validation=step == "test_step")

    def check_data(self, op, x, y, *, validation=False):
        """For a model with its own steps: ``(x, y)`` of ``fit`` (and its validation data,
        ``validation=True``) or ``evaluate`` checked, and converted if need be, once before
        the batches are made (``op`` is "fit" or "evaluate"). Returns them as given;
        override it to refuse bad data by name before any update."""
        return x, y

    def fit(self, x, y=None, epochs=1, batch_size=32, validation_data=None, callbacks=(),
            rng=None, verbose=1, shuffle=True, initial_epoch=0, validation_split=None,
            on_nonfinite=None, augment=None, distributed=False, steps_per_epoch=None,
            validation_steps=None, sample_weight=None, class_weight=None, **moved):
        """Train for ``epochs`` epochs; returns a :class:`History`.

        ``x`` is an array, a list in input order or a dict keyed by ``model.input_names``;
        ``y`` likewise by output (an output without a loss or metrics needs no targets).
        ``rng`` (Generator or seed) drives the shuffling; the same seed gives the same
        run. ``validation_data=(x_val, y_val)`` is evaluated after every epoch (logged as
        ``val_*``); ``validation_split=0.1`` holds out the last 10% of ``x``/``y``
        (taken before shuffling) for that instead. ``initial_epoch`` resumes the epoch
        count (e.g. from a checkpoint). ``callbacks`` get Keras's hooks at Keras's moments
        (:mod:`handgrad.training.hooks`). ``on_nonfinite`` ("raise", "stop" or "ignore")
        says what a NaN or infinite loss does (see :mod:`handgrad.training`). A custom
        :meth:`train_step` gets the batches of ``x`` and ``y`` as given. ``augment(x_batch,
        rng) -> x_batch`` (:mod:`handgrad.data.augment`) alters each training batch only.
        ``distributed=True``: every process of an MPI job calls ``fit`` with the whole
        data set and trains the same model, each on its share of every batch (see
        :mod:`handgrad.training.parallel`); ``batch_size`` is the global batch.
        A model that learns from ``x`` alone (``takes_targets = False``: the VAE, the
        WGAN-GP, the RBM) refuses a ``y``. ``sample_weight`` (N,) and ``class_weight``
        ``{class id: weight}`` weigh each example's loss as Keras (sum w_i l_i / batch
        size, :mod:`handgrad.training.weights`); ``validation_data`` may carry a third
        element, the validation sample weights, and ``validation_split`` splits the
        weights too.

        ``x`` may also be a generator or any iterable of ``(x, y)`` batches (``y`` then
        None; see :mod:`handgrad.training.streams`), and ``validation_data`` too.
        ``steps_per_epoch``: the batches of an epoch (needed with a generator, which goes
        on across epochs; with arrays, the first batches of each shuffled epoch);
        ``validation_steps``: the batches of each validation.
        """
        self._refuse_moved(moved, y)
        run = Run(x, y, epochs, batch_size, validation_data, callbacks, rng, verbose,
                  shuffle, initial_epoch, validation_split, on_nonfinite, augment,
                  flag("fit", "distributed", distributed), steps_per_epoch, validation_steps,
                  sample_weight, class_weight)
        return parallel.run(self._fit, run) if run.distributed else self._fit(run)

    def _refuse_moved(self, moved, y):
        """A TypeError for keywords fit does not take (naming where an old one went, see
        ``fit_moved``) and for a ``y`` given to a model without targets."""
        op = f"{type(self).__name__}.fit"
        for key in moved:
            where = self.fit_moved.get(key)
            if where is not None:
                raise TypeError(f"{op}: '{key}' is no longer an option of fit; {where}")
            raise TypeError(f"{op}: unexpected keyword argument {key!r}; fit takes x, y, "
                            f"epochs, batch_size, validation_data, callbacks, rng, verbose, "
                            f"shuffle, initial_epoch, validation_split, on_nonfinite, "
                            f"augment, distributed, steps_per_epoch, validation_steps, "
                            f"sample_weight and class_weight")
        if y is not None and not self.takes_targets:
            raise TypeError(f"{op}: 'y' must be None (the model learns from x alone; give "
                            f"epochs and batch_size by keyword, fit(x, epochs=10)); received "
                            f"{describe(y)}")

    def _fit(self, run):
        """The epochs of ``run`` (a :class:`Run` of ``fit``'s options, checked here)."""
        run, reducer = self._checked_run(run)
        self.stop_training = False
        self._on_nonfinite = run.on_nonfinite
        failed, logs = True, {}
        try:
            notify(run.callbacks, "on_train_begin", {})
            for epoch in range(resume(run.callbacks, run), run.epochs):
                notify(run.callbacks, "on_epoch_begin", epoch, {})
                logs = run_epoch(self, run, epoch)
                notify(run.callbacks, "on_epoch_end", epoch, logs)
                back_up(run.callbacks, epoch)
                if self.stop_training:
                    break
            notify(run.callbacks, "on_train_end", logs)
            failed = False
        finally:
            del self._on_nonfinite  # back to the class default
            if reducer is not None:
                reducer.close(wait=not failed)
        return run.callbacks[0]

    def _checked_run(self, run):
        """``(the run to train, the GradientReducer or None)``: ``run``'s options checked,
        its data in the form the step takes, its callbacks (History first) and the step
        and validation of one process, or of this process's share under MPI
        (:mod:`.parallel`, which also checks that the processes agree)."""
        custom = self._custom("train_step")
        if not custom:
            self._require_compiled("fit")
        for name, low in (("epochs", 0), ("batch_size", 1), ("initial_epoch", 0)):
            value = getattr(run, name)
            if not is_int(value) or value < low:
                raise ValueError(f"fit: '{name}' must be an int >= {low}; received {value!r}")
        run = replace(run, verbose=check_verbose("fit", run.verbose))
        x, y, validation_data, steps, weights = fit_data(self, run)
        callbacks = self._fit_callbacks(run.callbacks, validation_data is not None)
        if run.augment is not None and not callable(run.augment):
            raise TypeError(f"fit: 'augment' must be None or a callable (x_batch, rng) -> "
                            f"x_batch; received {describe(run.augment)}")
        on_nonfinite = run.on_nonfinite
        if on_nonfinite is None:
            terminate = any(isinstance(c, TerminateOnNaN) for c in callbacks)
            on_nonfinite = "ignore" if terminate else "raise"
        on_nonfinite = choice("fit", "on_nonfinite", on_nonfinite, NONFINITE)
        for callback in callbacks:
            callback.set_params({"verbose": run.verbose, "epochs": run.epochs, "steps": steps})
        rng = as_generator("fit", "rng", run.rng)
        checked = {"x": x, "y": y, "validation_data": validation_data, "rng": rng,
                   "on_nonfinite": on_nonfinite, "steps": steps, "sample_weight": weights}
        if run.distributed:
            reducer = parallel.prepare(self, replace(run, **checked))
            wiring = parallel.wiring(self, reducer, callbacks, run.verbose)
        else:
            reducer, wiring = None, {
                "step": self.train_step, "callbacks": callbacks,
                "evaluate": lambda xv, yv, size, hooked, wv: self.evaluate(
                    xv, yv, size, callbacks=hooked, return_dict=True,
                    **({} if run.validation_steps is None else
                       {"steps": run.validation_steps}),
                    **({} if wv is None else {"sample_weight": wv}))}
        return replace(run, **checked, **wiring), reducer

    def _fit_callbacks(self, callbacks, validating):
        """``[History(), *callbacks]``, each attached to the model and checked against
        the keys the epoch logs will have (known unless a step is custom)."""
        history = History()
        history.set_model(self)
        callbacks = [history, *prepare("fit", callbacks, self)]
        if not self._custom("train_step") and not (validating and self._custom("test_step")):
            names = self._objective.keys()
            keys = {*names, *(f"val_{name}" for name in names if validating), "lr", "seconds"}
            for callback in callbacks:
                callback.check_logs(keys)
        return callbacks
