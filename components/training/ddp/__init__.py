"""Data-parallel training on Ray Train (TorchTrainer, CPU workers over gloo) with gradient codecs
expressed as torch DDP communication hooks; shared by DUO and later data-parallel techniques."""
