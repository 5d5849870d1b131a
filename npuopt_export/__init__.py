"""npuopt-export: writes a float IR of a PyTorch module (torch.export), the IRs
npuopt's own tests and model tests start from; `models` holds the model zoo
they name (e.g. npuopt_export.models:efficientnet_lite0)."""
