"""A small project of its own: a LightningModule and a LightningDataModule, nothing of
scalescope in them."""
