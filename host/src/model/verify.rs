//! Placeholder until the verification lands.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("unverifiable: {reason}")]
    Unverifiable { reason: String },
    #[error("wrong")]
    Wrong,
}
pub fn verify(_block: &super::Block) -> Result<(), VerifyError> {
    Ok(())
}
