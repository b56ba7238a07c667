"""`gradwire train`: a data-parallel training job on embedded models (models, worker, job),
Gloo beside gradwire, with a table and a training-curve plot."""
