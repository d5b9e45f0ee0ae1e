"""Reading untrusted files: CSV tables, CSV/Parquet/.npz matrices and masks, zips and .npy
arrays with bounded memory. Imports only the data layer below it."""
