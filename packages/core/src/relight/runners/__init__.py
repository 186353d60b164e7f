"""Runners: claim rollouts from the store and run the user's agent on them, many at once.

:class:`relight.Runner` (:mod:`.runner`) in this process, on threads that can be abandoned
(:mod:`._threads`); runner processes on this machine (:mod:`.processes`) watched by a supervisor
(:mod:`.supervisor`); runners as Ray actors (:mod:`.ray_actors`); and what the trainer needs of any
group of runners outside its process (:mod:`.group`).
"""
