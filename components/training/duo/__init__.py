"""DUO (Double Update Overlap): low-bit fast gradient sync with a tentative update, and the
full-precision reduction of the cached gradient hidden behind the next forward, committed one step late."""
