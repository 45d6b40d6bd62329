//! Reading and writing the stage tables (`pages`, `errors`, `chunks`, `embeddings`) in the
//! schemas this module's parent declares.
use super::*;

fn strings<'a>(it: impl Iterator<Item = &'a str>) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(it))
}

fn char_len(s: &str) -> i32 {
    s.chars().count() as i32
}

/// Writes `pages.parquet`.
pub fn write_pages(path: &Path, pages: &[PageRecord]) -> Result<u64, CoreError> {
    let columns: Vec<ArrayRef> = vec![
        strings(pages.iter().map(|p| p.doc_id.as_str())),
        strings(pages.iter().map(|p| p.source.as_str())),
        strings(pages.iter().map(|p| p.doc_type.as_str())),
        strings(pages.iter().map(|p| p.title.as_str())),
        Arc::new(Int32Array::from_iter_values(pages.iter().map(|p| p.page))),
        strings(pages.iter().map(|p| p.text.as_str())),
        Arc::new(Int32Array::from_iter_values(pages.iter().map(|p| char_len(&p.text)))),
        Arc::new(BooleanArray::from(pages.iter().map(|p| p.empty).collect::<Vec<_>>())),
        strings(pages.iter().map(|p| p.metadata.as_str())),
    ];
    write_parquet(path, arrow_schema(PAGE_COLUMNS), columns)
}

/// Reads `pages.parquet`, checking its schema.
pub fn read_pages(path: &Path) -> Result<Vec<PageRecord>, CoreError> {
    let batch = read_parquet(path, &arrow_schema(PAGE_COLUMNS))?;
    let c = Columns::new(&batch);
    let (doc_id, source, doc_type, title, page, text, empty, metadata) = (
        c.strings_required("doc_id"),
        c.strings_required("source"),
        c.strings_required("doc_type"),
        c.strings_required("title"),
        c.i32s("page"),
        c.strings_required("text"),
        c.bools("empty"),
        c.strings_required("metadata"),
    );
    Ok((0..batch.num_rows())
        .map(|i| PageRecord {
            doc_id: doc_id[i].clone(),
            source: source[i].clone(),
            doc_type: doc_type[i].clone(),
            title: title[i].clone(),
            page: page[i],
            text: text[i].clone(),
            empty: empty[i],
            metadata: metadata[i].clone(),
        })
        .collect())
}

/// Writes `errors.parquet`.
pub fn write_errors(path: &Path, errors: &[ErrorRecord]) -> Result<u64, CoreError> {
    let columns: Vec<ArrayRef> = vec![
        strings(errors.iter().map(|e| e.source.as_str())),
        strings(errors.iter().map(|e| e.reason.as_str())),
    ];
    write_parquet(path, arrow_schema(ERROR_COLUMNS), columns)
}

/// Reads `errors.parquet`.
pub fn read_errors(path: &Path) -> Result<Vec<ErrorRecord>, CoreError> {
    let batch = read_parquet(path, &arrow_schema(ERROR_COLUMNS))?;
    let c = Columns::new(&batch);
    let (source, reason) = (c.strings_required("source"), c.strings_required("reason"));
    Ok(source.into_iter().zip(reason).map(|(source, reason)| ErrorRecord { source, reason }).collect())
}

/// Writes `chunks.parquet`; the `embed_text` column is written when any chunk has one.
pub fn write_chunks(path: &Path, chunks: &[ChunkRecord]) -> Result<u64, CoreError> {
    let mut docs: Vec<ColumnDoc> = CHUNK_COLUMNS.to_vec();
    let mut columns: Vec<ArrayRef> = vec![
        strings(chunks.iter().map(|c| c.chunk_id.as_str())),
        strings(chunks.iter().map(|c| c.doc_id.as_str())),
        strings(chunks.iter().map(|c| c.source.as_str())),
        strings(chunks.iter().map(|c| c.doc_type.as_str())),
        strings(chunks.iter().map(|c| c.title.as_str())),
        strings(chunks.iter().map(|c| c.section.as_str())),
        Arc::new(Int32Array::from_iter_values(chunks.iter().map(|c| c.page_start))),
        Arc::new(Int32Array::from_iter_values(chunks.iter().map(|c| c.page_end))),
        Arc::new(Int64Array::from_iter_values(chunks.iter().map(|c| c.char_start))),
        Arc::new(Int64Array::from_iter_values(chunks.iter().map(|c| c.char_end))),
        Arc::new(Int32Array::from_iter_values(chunks.iter().map(|c| c.chunk_index))),
        Arc::new(StringArray::from(chunks.iter().map(|c| c.prev_chunk_id.clone()).collect::<Vec<_>>())),
        Arc::new(StringArray::from(chunks.iter().map(|c| c.next_chunk_id.clone()).collect::<Vec<_>>())),
        strings(chunks.iter().map(|c| c.text.as_str())),
        Arc::new(Int32Array::from_iter_values(chunks.iter().map(|c| char_len(&c.text)))),
    ];
    if chunks.iter().any(|c| c.embed_text.is_some()) {
        docs.push(EMBED_TEXT_COLUMN);
        columns.push(strings(chunks.iter().map(|c| c.embed_text.as_deref().unwrap_or(c.text.as_str()))));
    }
    if chunks.iter().any(ChunkRecord::is_summary) {
        docs.extend_from_slice(SUMMARY_COLUMNS);
        columns.push(Arc::new(Int32Array::from_iter_values(chunks.iter().map(|c| c.level))));
        let children: Vec<String> = chunks.iter().map(|c| serde_json::to_string(&c.children).expect("ids serialise")).collect();
        columns.push(strings(children.iter().map(String::as_str)));
    }
    write_parquet(path, arrow_schema(&docs), columns)
}

/// Reads `chunks.parquet`, checking its schema.
pub fn read_chunks(path: &Path) -> Result<Vec<ChunkRecord>, CoreError> {
    let batch = read_parquet(path, &arrow_schema(CHUNK_COLUMNS))?;
    let c = Columns::new(&batch);
    let s = |n: &str| c.strings_required(n);
    let (chunk_id, doc_id, source, doc_type, title, section, text) =
        (s("chunk_id"), s("doc_id"), s("source"), s("doc_type"), s("title"), s("section"), s("text"));
    let (page_start, page_end, chunk_index) = (c.i32s("page_start"), c.i32s("page_end"), c.i32s("chunk_index"));
    let (char_start, char_end) = (c.i64s("char_start"), c.i64s("char_end"));
    let (prev, next) = (c.strings("prev_chunk_id"), c.strings("next_chunk_id"));
    let embed = if c.has("embed_text") { Some(c.strings("embed_text")) } else { None };
    let level = if c.has("level") { c.i32s("level") } else { vec![0; batch.num_rows()] };
    let children: Vec<Vec<String>> = if c.has("children") {
        c.strings_required("children")
            .iter()
            .map(|j| serde_json::from_str(j).map_err(|e| CoreError::Artifact { path: path.to_path_buf(), message: format!("column `children` is not a JSON list of chunk ids ({e})") }))
            .collect::<Result<_, _>>()?
    } else {
        vec![Vec::new(); batch.num_rows()]
    };
    Ok((0..batch.num_rows())
        .map(|i| ChunkRecord {
            chunk_id: chunk_id[i].clone(),
            doc_id: doc_id[i].clone(),
            source: source[i].clone(),
            doc_type: doc_type[i].clone(),
            title: title[i].clone(),
            section: section[i].clone(),
            page_start: page_start[i],
            page_end: page_end[i],
            char_start: char_start[i],
            char_end: char_end[i],
            chunk_index: chunk_index[i],
            prev_chunk_id: prev[i].clone(),
            next_chunk_id: next[i].clone(),
            text: text[i].clone(),
            embed_text: embed.as_ref().and_then(|e| e[i].clone()),
            level: level[i],
            children: children[i].clone(),
        })
        .collect())
}

fn vector_type(dim: usize) -> DataType {
    DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float32, false)), dim as i32)
}

/// Writes `embeddings.parquet`: ids and row-major vectors of `dim` floats.
pub fn write_embeddings(path: &Path, ids: &[String], vectors: &[f32], dim: usize) -> Result<u64, CoreError> {
    assert_eq!(ids.len() * dim, vectors.len(), "one vector of `dim` floats per id");
    let values = arrow::array::Float32Array::from(vectors.to_vec());
    let field = Arc::new(Field::new("item", DataType::Float32, false));
    let list = arrow::array::FixedSizeListArray::try_new(field, dim as i32, Arc::new(values), None)
        .map_err(|e| CoreError::Parquet { path: path.to_path_buf(), message: e.to_string() })?;
    let schema = Arc::new(Schema::new(vec![Field::new("chunk_id", DataType::Utf8, false), Field::new("vector", vector_type(dim), false)]));
    write_parquet(path, schema, vec![strings(ids.iter().map(String::as_str)), Arc::new(list)])
}

/// Embeddings read back: ids, row-major vectors, dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// Chunk ids.
    pub ids: Vec<String>,
    /// `ids.len() × dim` floats, row-major.
    pub vectors: Vec<f32>,
    /// Dimension.
    pub dim: usize,
}

/// Reads `embeddings.parquet`, checking its schema.
pub fn read_embeddings(path: &Path) -> Result<Embeddings, CoreError> {
    let file = std::fs::File::open(path).map_err(|e| CoreError::io(path, e))?;
    let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| CoreError::Parquet { path: path.to_path_buf(), message: format!("not a readable Parquet file ({e})") })?;
    let dim = match builder.schema().field_with_name("vector").map(|f| f.data_type().clone()) {
        Ok(DataType::FixedSizeList(inner, d)) if inner.data_type() == &DataType::Float32 => d as usize,
        Ok(other) => {
            return Err(CoreError::Schema { path: path.to_path_buf(), message: format!("column `vector` is {other}, expected FixedSizeList(Float32)") })
        }
        Err(_) => return Err(CoreError::Schema { path: path.to_path_buf(), message: "missing column `vector` (FixedSizeList(Float32))".into() }),
    };
    drop(builder);
    let expected = Schema::new(vec![Field::new("chunk_id", DataType::Utf8, false), Field::new("vector", vector_type(dim), false)]);
    let batch = read_parquet(path, &expected)?;
    let ids = Columns::new(&batch).strings_required("chunk_id");
    let list = batch
        .column_by_name("vector")
        .and_then(|c| c.as_any().downcast_ref::<arrow::array::FixedSizeListArray>())
        .expect("checked schema");
    let values = list.values().as_any().downcast_ref::<arrow::array::Float32Array>().expect("checked schema");
    Ok(Embeddings { ids, vectors: values.values().to_vec(), dim })
}
