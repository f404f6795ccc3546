"""Training techniques: error feedback, (later) data-parallel codecs, fault tolerance."""
