"""The local action caches (memory and filesystem, ``_caches``), the
filesystem cache's log (``_log``), and what every cache shares: results served
only when complete (``_results``) and the checks on their paths
(``_result_paths``). Private to lre.cas: other packages import from ``lre.cas``."""
