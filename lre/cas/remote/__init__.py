"""Stores over a remote REAPI server: the grpc CAS (``_store``), the grpc and
fast/slow action caches (``_action_cache``) and uploads of a result's blobs to
the upstream (``_uploads``). Private to lre.cas: other packages import from
``lre.cas``."""
