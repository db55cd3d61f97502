"""``torch.compile(model, backend="kernelsmith")``: evolved kernels swapped into real models."""
