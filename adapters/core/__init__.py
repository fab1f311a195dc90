"""The controller's core: where a watch event becomes a decision's world, and an effect a request.

`controller.py` composes `nicplug run`; `observing.py` and `worldview.py` turn object
changes into one `World` per VM for the runtime; `executor/` turns the machines'
effects into Kubernetes requests; `settings.py`, `scope.py` and `platform_mode.py` say
what the controller runs with; `reporting.py`, `observability.py` and `loop_lag.py`
what it shows; `retention.py`, `created_objects.py` and `operation_objects.py` are the
leader's upkeep and projection tasks. The ports it drives (`kube/`, `sdn/`, `tapes/`,
`queries/`) sit beside it in `adapters/` and never import it; the edges (`cli/`, `demo/`,
`simulation/`) import it, and it never imports them.
"""
