-- Blobs are read in slices (the BFF streams a download in 512 KiB chunks with
-- substring()). Stored EXTERNAL — out of line, uncompressed — a slice reads only
-- its own pages; compressed, every slice would decompress the blob up to its end.
-- Applies to blobs written from now on.
ALTER TABLE surface_result_blobs ALTER COLUMN data SET STORAGE EXTERNAL;
