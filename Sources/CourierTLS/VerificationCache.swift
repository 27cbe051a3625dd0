import CCourierOpenSSL
import CourierSync
import Glibc

/// The server chains a client context verified lately, so that a new connection presenting the
/// same certificates for the same name skips the chain's verification (`X509_verify_cert`), as
/// Chromium's certificate verifier does. That verification is about a tenth of a new
/// connection's time here: the issuer's signature on the leaf, found by a search of the store.
///
/// A verdict is kept only when the chain verified, and it is given again only when all of this
/// holds: the certificates presented are byte for byte the ones verified, in the same order;
/// the name checked is the same; the connection's verification time lies inside every
/// certificate's validity in the verified chain (the root's included); and that time is within
/// ``lifetime`` of the verification. The context's store and verification settings do not change
/// after it is made, so nothing else bears on the verdict. The handshake still checks the
/// server's signature over the handshake with the leaf's key: the cache stands in for the chain,
/// never for the proof that the server holds the key. Failures are not kept: each is found
/// again, with its own reason.
final class VerificationCache: @unchecked Sendable {
    /// How long a verdict is given again, in seconds of verification time.
    static let lifetime: Int64 = 600
    /// How many verdicts a context keeps; the oldest goes first.
    static let capacity = 32

    private struct Verdict {
        let name: String
        /// The certificates presented, DER, in the order presented.
        let presented: [[UInt8]]
        /// The verified chain, leaf to root.
        let chain: [TLSCertificate]
        /// When the verification ran, and the span in which every certificate of the chain is
        /// valid (seconds since 1970): from the latest notBefore, up to but not including the
        /// earliest notAfter, as OpenSSL counts a certificate expired at its notAfter.
        let verifiedAt: Int64
        let validFrom: Int64
        let validUntil: Int64

        func answers(name: String, presented: [[UInt8]], time: Int64) -> Bool {
            time >= validFrom && time < validUntil && abs(time - verifiedAt) <= VerificationCache.lifetime
                && name == self.name && presented == self.presented
        }
    }

    private struct State {
        var verdicts: [Verdict] = []
        /// How many verifications the cache answered (tests read it).
        var hits = 0
    }

    private let state = Mutex(State())

    var hits: Int { state.withLock { $0.hits } }
    /// How many verdicts it keeps.
    var count: Int { state.withLock { $0.verdicts.count } }

    /// OpenSSL's verification of the chain in `storeContext` for `name` at `time`, or the kept
    /// verdict for it: 1 when the chain verified, else 0 with the reason in the store context,
    /// as `X509_verify_cert` returns.
    func verify(_ storeContext: OpaquePointer, name: String, time: Int64) -> Int32 {
        let presented = Self.presented(storeContext)
        if let presented, let chain = state.withLock({ $0.verdicts.last { $0.answers(name: name, presented: presented, time: time) }?.chain }) {
            // The store context owns the stack it is given, and frees it with its certificates.
            // A stack that could not take every certificate is dropped, and the chain verified.
            if let stack = courier_sk_X509_new_null() {
                var whole = true
                for certificate in chain {
                    guard courier_sk_X509_push(stack, certificate.x509) > 0 else {
                        whole = false
                        break
                    }
                    X509_up_ref(certificate.x509)
                }
                if whole {
                    X509_STORE_CTX_set0_verified_chain(storeContext, stack)
                    X509_STORE_CTX_set_error(storeContext, X509_V_OK)
                    state.withLock { $0.hits += 1 }
                    return 1
                }
                courier_sk_X509_pop_free(stack)
            }
        }
        let result = X509_verify_cert(storeContext)
        guard result == 1, X509_STORE_CTX_get_error(storeContext) == X509_V_OK, let presented,
              let verified = X509_STORE_CTX_get0_chain(storeContext) else { return result }
        var chain: [TLSCertificate] = []
        var validFrom = Int64.min, validUntil = Int64.max
        for index in 0..<courier_sk_X509_num(verified) {
            guard let certificate = courier_sk_X509_value(verified, index),
                  let start = Self.seconds(X509_get0_notBefore(certificate)),
                  let end = Self.seconds(X509_get0_notAfter(certificate)) else { return result }
            chain.append(TLSCertificate(retaining: certificate))
            validFrom = max(validFrom, start)
            validUntil = min(validUntil, end)
        }
        let verdict = Verdict(name: name, presented: presented, chain: chain, verifiedAt: time, validFrom: validFrom, validUntil: validUntil)
        state.withLock { state in
            state.verdicts.removeAll { $0.name == name && $0.presented == presented }
            if state.verdicts.count >= Self.capacity { state.verdicts.removeFirst(state.verdicts.count - Self.capacity + 1) }
            state.verdicts.append(verdict)
        }
        return result
    }

    /// The DER of the certificate under verification, then of the other certificates the
    /// server sent (libssl passes the leaf among them too: it is encoded once); nil when one
    /// cannot be encoded.
    private static func presented(_ storeContext: OpaquePointer) -> [[UInt8]]? {
        guard let leaf = X509_STORE_CTX_get0_cert(storeContext), let first = TLSCertificate.der(leaf) else { return nil }
        var encoded = [first]
        if let sent = X509_STORE_CTX_get0_untrusted(storeContext) {
            for index in 0..<courier_sk_X509_num(sent) {
                guard let certificate = courier_sk_X509_value(sent, index) else { return nil }
                if certificate == leaf { continue }
                guard let bytes = TLSCertificate.der(certificate) else { return nil }
                encoded.append(bytes)
            }
        }
        return encoded
    }

    /// An ASN.1 time as seconds since 1970.
    static func seconds(_ time: UnsafePointer<ASN1_TIME>?) -> Int64? {
        guard let time else { return nil }
        var parts = tm()
        guard ASN1_TIME_to_tm(time, &parts) == 1 else { return nil }
        return Int64(timegm(&parts))
    }
}
