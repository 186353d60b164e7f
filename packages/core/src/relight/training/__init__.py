"""The training loop: :class:`relight.Trainer` and what it drives.

The trainer (:mod:`.trainer`) runs rollouts through the gateway and hands transitions to an
algorithm, step by step (:mod:`.sync_loop`) or with bounded staleness (:mod:`.async_loop`); both
loops share :mod:`.loop`. Around them: the early role check (:mod:`.role_check`), dev mode's report
(:mod:`.dev_report`), learning signal (:mod:`.learning_signal`), the run folder and its plot
(:mod:`.run_folder`, :mod:`.run_plot`) and progress in a terminal and a log (:mod:`.progress`).
"""
