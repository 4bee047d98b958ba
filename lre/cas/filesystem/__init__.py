"""The filesystem store family: ``FilesystemStore`` (``_store``) and the
modules it is made of (blob files, index and eviction, scan at open, writes,
variants, leftovers, inline calls). Private to lre.cas: other packages import
from ``lre.cas``."""
