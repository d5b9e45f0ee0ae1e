"""What a fit is: the Fit record, its labelled frames, saving and loading (with the loader's
checks) and the label codec. Imports the layers below: models, data, posterior."""

from bernmf.results.fit import Fit

__all__ = ["Fit"]
