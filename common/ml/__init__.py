"""Machine learning for the jobs: models, optimizers, data, evaluation, CodeNet's network. No I/O
beyond reading the data files a job names."""
