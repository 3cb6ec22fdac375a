"""A stand-in kernel family, used only to test the registry's plumbing: it has no kernel. Its
``family.py`` joins torch_flydsl through one ``registry.register`` call."""
