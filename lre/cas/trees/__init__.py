"""Directory trees in a CAS: validation, walking and measuring (``_tree``),
parsed directories kept in memory (``_directory_cache``) and the one reader of
trees (``_directory_reader``). Private to lre.cas: other packages import from
``lre.cas``."""
