"""NumpyMultiInputDataset: one array per graph input, in the graph's input order
(`input_tensors` of the IR), each with samples along its first axis:

- an .npz: the arrays in the order they were stored, e.g.
  `np.savez('data.npz', first_input, second_input)` (keyword names are allowed;
  their order is what counts);
- an .npy holding an object array of the per-input arrays (the Compass
  convention; it is a pickle, so load only files you trust), or a numeric
  array whose first axis is the input (what `np.save` makes of a list of
  equally shaped arrays).

Each sample is a tuple with one array per input; labels as NumpyDataset."""
from npuopt.datasets_common import NumpyDatasetBase, numeric_array, load_npy
from npuopt.framework import *


@register_plugin(PluginType.Dataset, "1.0")
class NumpyMultiInputDataset(NumpyDatasetBase):
    def read_inputs(self, data_file):
        data = load_npy(data_file, self.who, "data file", allow_objects=True)
        if isinstance(data, dict):
            return [numeric_array(a, self.who, f"array '{name}' of '{data_file}'") for name, a in data.items()]
        if data.ndim < (1 if data.dtype == object else 2):
            raise DatasetError(f"{self.who}: data file '{data_file}' has shape {list(data.shape)}; expected "
                               f"one array per input (an .npz, an object array, or inputs along the first axis)")
        return [numeric_array(a, self.who, f"input {i} of '{data_file}'") for i, a in enumerate(data)]
