//! Parquet tables: zstd-compressed writes via a temporary file, schema-checked reads.
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::CoreError;

/// Writes one table as Parquet (zstd), through `<path>.partial` renamed into place.
pub fn write_parquet(path: &Path, schema: Arc<Schema>, columns: Vec<ArrayRef>) -> Result<u64, CoreError> {
    let perr = |message: String| CoreError::Parquet { path: path.to_path_buf(), message };
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|e| perr(e.to_string()))?;
    let rows = batch.num_rows() as u64;
    // One temporary per process: two processes writing one path each replace it whole.
    let partial = path.with_extension(format!("parquet.partial-{}", std::process::id()));
    let file = std::fs::File::create(&partial).map_err(|e| CoreError::io(&partial, e))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).expect("valid zstd level")))
        .set_created_by(format!("gauge {}", crate::GAUGE_VERSION))
        .build();
    let mut writer = ArrowWriter::try_new(file, schema, Some(props)).map_err(|e| perr(e.to_string()))?;
    writer.write(&batch).map_err(|e| perr(e.to_string()))?;
    let file = writer.into_inner().map_err(|e| perr(e.to_string()))?;
    file.sync_all().map_err(|e| CoreError::io(&partial, e))?;
    drop(file);
    std::fs::rename(&partial, path).map_err(|e| CoreError::io(path, e))?;
    Ok(rows)
}

/// Reads a whole Parquet table into one batch, checking it has `expected` columns
/// (name and type; extra columns are allowed).
pub fn read_parquet(path: &Path, expected: &Schema) -> Result<RecordBatch, CoreError> {
    let perr = |message: String| CoreError::Parquet { path: path.to_path_buf(), message };
    let file = std::fs::File::open(path).map_err(|e| CoreError::io(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| perr(format!("not a readable Parquet file ({e})")))?;
    let schema = builder.schema().clone();
    check_schema(path, &schema, expected)?;
    let reader = builder.with_batch_size(65536).build().map_err(|e| perr(e.to_string()))?;
    let mut batches = Vec::new();
    for batch in reader {
        batches.push(batch.map_err(|e| perr(e.to_string()))?);
    }
    let batch = arrow::compute::concat_batches(&schema, &batches).map_err(|e| perr(e.to_string()))?;
    // A column gauge declares non-null must hold no null (read as "" or 0 it would hide bad data).
    for field in expected.fields().iter().filter(|f| !f.is_nullable()) {
        if let Some(col) = batch.column_by_name(field.name()) {
            if col.null_count() > 0 {
                let row = (0..col.len()).find(|&i| col.is_null(i)).unwrap_or(0);
                return Err(CoreError::Schema { path: path.to_path_buf(), message: format!("column `{}` has {} nulls (first at row {}); it must hold a value on every row", field.name(), col.null_count(), row + 1) });
            }
        }
    }
    Ok(batch)
}

/// Reads a whole Parquet table into one batch, whatever its columns.
pub fn read_parquet_any(path: &Path) -> Result<RecordBatch, CoreError> {
    read_parquet(path, &Schema::empty())
}

/// Checks that `actual` has every column of `expected` with the same type.
pub fn check_schema(path: &Path, actual: &Schema, expected: &Schema) -> Result<(), CoreError> {
    let mut problems = Vec::new();
    for field in expected.fields() {
        match actual.field_with_name(field.name()) {
            Ok(found) if same_type(found.data_type(), field.data_type()) => {}
            Ok(found) => problems.push(format!(
                "column `{}` is {}, expected {}",
                field.name(),
                found.data_type(),
                field.data_type()
            )),
            Err(_) => problems.push(format!("missing column `{}` ({})", field.name(), field.data_type())),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(CoreError::Schema { path: path.to_path_buf(), message: problems.join("; ") })
    }
}

fn same_type(a: &DataType, b: &DataType) -> bool {
    use DataType::*;
    matches!((a, b), (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View)) || a == b
}

/// Typed access to the columns of a batch already checked by [`read_parquet`].
pub struct Columns<'a> {
    batch: &'a RecordBatch,
}

impl<'a> Columns<'a> {
    /// Wraps a batch.
    pub fn new(batch: &'a RecordBatch) -> Self {
        Columns { batch }
    }

    fn column(&self, name: &str) -> &'a ArrayRef {
        self.batch.column_by_name(name).unwrap_or_else(|| panic!("column {name} checked by read_parquet"))
    }

    /// A string column as owned values (nulls become `None`).
    pub fn strings(&self, name: &str) -> Vec<Option<String>> {
        let col = self.column(name);
        let col = arrow::compute::cast(col, &DataType::Utf8).expect("string column casts to Utf8");
        let arr = col.as_any().downcast_ref::<arrow::array::StringArray>().expect("Utf8 array");
        (0..arr.len()).map(|i| if arr.is_null(i) { None } else { Some(arr.value(i).to_string()) }).collect()
    }

    /// A non-null string column.
    pub fn strings_required(&self, name: &str) -> Vec<String> {
        self.strings(name).into_iter().map(Option::unwrap_or_default).collect()
    }

    /// An Int32 column.
    pub fn i32s(&self, name: &str) -> Vec<i32> {
        let arr = self.column(name).as_any().downcast_ref::<arrow::array::Int32Array>().expect("Int32 array");
        arr.values().to_vec()
    }

    /// An Int32 column with nulls.
    pub fn i32s_nullable(&self, name: &str) -> Vec<Option<i32>> {
        let arr = self.column(name).as_any().downcast_ref::<arrow::array::Int32Array>().expect("Int32 array");
        (0..arr.len()).map(|i| if arr.is_null(i) { None } else { Some(arr.value(i)) }).collect()
    }

    /// An Int64 column.
    pub fn i64s(&self, name: &str) -> Vec<i64> {
        let arr = self.column(name).as_any().downcast_ref::<arrow::array::Int64Array>().expect("Int64 array");
        arr.values().to_vec()
    }

    /// A Float64 column (nulls become `None`).
    pub fn f64s(&self, name: &str) -> Vec<Option<f64>> {
        let arr = self.column(name).as_any().downcast_ref::<arrow::array::Float64Array>().expect("Float64 array");
        (0..arr.len()).map(|i| if arr.is_null(i) { None } else { Some(arr.value(i)) }).collect()
    }

    /// A Boolean column.
    pub fn bools(&self, name: &str) -> Vec<bool> {
        let arr = self.column(name).as_any().downcast_ref::<arrow::array::BooleanArray>().expect("Boolean array");
        (0..arr.len()).map(|i| arr.value(i)).collect()
    }

    /// Whether the batch has a column.
    pub fn has(&self, name: &str) -> bool {
        self.batch.column_by_name(name).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_in_a_column_declared_non_null_are_refused() {
        use arrow::array::{ArrayRef, StringArray};
        use arrow::datatypes::{DataType, Field, Schema};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.parquet");
        let loose = Schema::new(vec![Field::new("qid", DataType::Utf8, true)]);
        write_parquet(&path, std::sync::Arc::new(loose.clone()), vec![std::sync::Arc::new(StringArray::from(vec![Some("a"), None])) as ArrayRef]).unwrap();
        assert_eq!(read_parquet(&path, &loose).unwrap().num_rows(), 2);
        let strict = Schema::new(vec![Field::new("qid", DataType::Utf8, false)]);
        let e = read_parquet(&path, &strict).unwrap_err().to_string();
        assert!(e.contains("t.parquet") && e.contains("`qid` has 1 nulls (first at row 2)"), "{e}");
    }
}
