"""Synthetic torch_npu profiling data (see ``sample_data.generate``)."""
