"""`moetools cold-twin`: is a model on the hot (NVMe) tier safely duplicated on cold storage?

Modules: `scan` (artifact discovery and the cold-tier index, stat and names only), `hashing`
(xxh3-128 digests and their on-disk cache), `core` (twin search and verification), `actions`
(evict, migrate, --free selection, the JSON-lines action log), `report` (the JSON document and
the exit verdict), `command` (the click command: options in, rendering out). Below them all,
`types` (the shared records: FileStat, Artifact, Twin, Result, the statuses) and `fsops` (path tests
and the verified copy), which import no coldtwin module but hashing (fsops) and types.
"""
