"""The internal topics' record formats (__consumer_offsets, __cluster_metadata), used by the wire and the tools."""
