"""Diffusion inference techniques over the shared tiny DiT (components/models/dit.py): data and
trained models in :mod:`.prepare`, CFG sampling with pluggable block runners in :mod:`.sampling`,
quality against full compute in :mod:`.quality`; Foresight's adaptive layer reuse in
:mod:`.foresight`."""
