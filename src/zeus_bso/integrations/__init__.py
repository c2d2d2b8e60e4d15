"""The framework adapters, thin hook mappings over `zeus_bso.training.TrialSession`:

- `zeus_bso.integrations.lightning`: `ZeusBSOCallback`, a PyTorch Lightning callback;
- `zeus_bso.integrations.huggingface`: `ZeusBSOTrainerCallback`, a Hugging Face `TrainerCallback`;
- `zeus_bso.integrations.accelerate`: `ZeusBSOAccelerate`, for a loop on an `Accelerator`;
- `zeus_bso.integrations.fabric`: `ZeusBSOFabric`, for a loop on Lightning `Fabric`.

Each imports its framework, so this package imports none of them: import the module you need.
"""
