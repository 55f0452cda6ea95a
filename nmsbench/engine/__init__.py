"""The measurement engine: named axes, benchmark plug-ins, rotated rounds and raw samples."""
