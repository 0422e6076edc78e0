"""Decode on read: stored wire-form changes -> contract-shaped changes (``changes``), through one
plan per relation version (``plan``) and the type registry's loaders (``values``)."""
