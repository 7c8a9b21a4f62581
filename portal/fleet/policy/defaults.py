"""The rows for every signal that is not an XID (the XIDs come from the catalogue).

NVML recovery actions (``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``): 0 none, 1 GPU reset,
2 node reboot, 3 drain peer-to-peer traffic (then re-query), 4 drain and reset (reduced
capacity, running work is safe), 5 GPU reset through the bus (newer drivers).
"""

from __future__ import annotations

from portal.fleet.policy.types import Action, Rule, Scope, Severity

A, S, V = Action, Scope, Severity
SYMBOL_ERRORS_PER_HOUR = 120.0  # IBTA's bit-error-rate limit as NVSentinel applies it


def _r(key: str, severity: Severity, action: Action, scope: Scope, fence: bool, cause: str,
       **params: float) -> Rule:
    return Rule(key=key, severity=severity, action=action, scope=scope, fence=fence,
                cause=cause, params=params)


SIGNAL_RULES: tuple[Rule, ...] = (
    _r("gpu_lost", V.FATAL, A.REBOOT_NODE, S.NODE, True,
       "NVML says the GPU is lost (GpuIsLost, as XID 79): reboot the node"),
    _r("ecc_dbe", V.FATAL, A.RESET_GPU, S.GPU, True,
       "volatile uncorrected ECC errors increased (double-bit error)"),
    _r("remap_pending", V.WARNING, A.RESET_GPU, S.GPU, False,
       "a row remap is pending: applied at the next GPU reset, running work may go on"),
    _r("remap_failure", V.FATAL, A.RMA, S.GPU, True,
       "row remapping failed: the GPU needs service"),
    _r("thermal", V.WARNING, A.CHECK_NODE, S.GPU, False,
       "clocks slowed for temperature (SW/HW thermal slowdown)"),
    _r("power_brake", V.WARNING, A.CHECK_NODE, S.GPU, False,
       "clocks slowed by the power brake (HW power brake slowdown)"),
    _r("recovery_action.0", V.INFO, A.NONE, S.GPU, False,
       "NVML recovery action back to none"),
    _r("recovery_action.1", V.FATAL, A.RESET_GPU, S.GPU, True,
       "NVML recovery action: GPU reset required"),
    _r("recovery_action.2", V.FATAL, A.REBOOT_NODE, S.NODE, True,
       "NVML recovery action: node reboot required"),
    _r("recovery_action.3", V.WARNING, A.RESTART_APP, S.GPU, False,
       "NVML recovery action: drain peer-to-peer traffic, then re-query"),
    _r("recovery_action.4", V.WARNING, A.RESET_GPU, S.GPU, False,
       "NVML recovery action: drain and reset (reduced capacity, running work is safe)"),
    _r("recovery_action.5", V.FATAL, A.RESET_GPU, S.GPU, True,
       "NVML recovery action: GPU reset through the bus required"),
    _r("recovery_action.default", V.WARNING, A.CONTACT_SUPPORT, S.GPU, False,
       "an NVML recovery action this table does not know"),
    _r("ib_port_down", V.FATAL, A.CHECK_LINK, S.PORT, True,
       "InfiniBand port left ACTIVE/LinkUp"),
    _r("ib_port_up", V.INFO, A.NONE, S.PORT, False,
       "InfiniBand port back to ACTIVE/LinkUp"),
    _r("ib_link_downed", V.FATAL, A.CHECK_LINK, S.PORT, True,
       "InfiniBand link_downed counter increased (the link went down)"),
    _r("ib_symbol_errors", V.FATAL, A.CHECK_LINK, S.PORT, True,
       "InfiniBand symbol errors over the bit-error-rate limit",
       per_hour=SYMBOL_ERRORS_PER_HOUR),
    _r("agent_silent", V.FATAL, A.CHECK_NODE, S.NODE, True,
       "no report from the node agent for the unreachable threshold: fenced out of its "
       "leases and replaced; validated by its agent when it reports again"),
)

# Rows whose signal value is a code looked up as ``<kind>.<value>`` (fallback
# ``<kind>.default``); every other kind has one row keyed by its name.
CODED_KINDS = ("xid", "recovery_action")


def signal_rules() -> dict[str, Rule]:
    return {rule.key: rule for rule in SIGNAL_RULES}
