"""Training and dev mode: :class:`relight.Trainer` and what it drives.

The trainer (:mod:`.trainer`, a thin facade over its settings, :mod:`.options`) runs a ``fit``
(:mod:`.fit`) or a dev run (:mod:`.dev`) on the services a run starts (:mod:`.services`: store, gateway,
runners). A fit hands transitions to an algorithm through the training loop: step by step
(:mod:`.sync_loop`) or with bounded staleness (:mod:`.async_loop`); both share :mod:`.loop`. Around
them: dynamic sampling of groups without learning signal (:mod:`.dynamic_sampling`), the early role
check (:mod:`.role_check`), dev mode's report (:mod:`.dev_report`), the run folder and its plot
(:mod:`.run_folder`, :mod:`.run_plot`), resuming a killed run (:mod:`.resume`) and progress in a
terminal and a log (:mod:`.progress`).
"""
