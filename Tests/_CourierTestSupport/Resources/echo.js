// njs handlers for Courier's test nginx: echo what the request carried, answer with a chosen
// status, and stream a body slowly. Loaded with js_import; see NginxServer.swift.

function digest(data) {
    return require('crypto').createHash('sha256').update(data).digest('hex');
}

// Answers with the method, target, request headers, and the body's length and SHA-256.
function echo(r) {
    var body = r.requestBuffer;
    if (body === undefined) {
        body = Buffer.from('');
    }
    r.headersOut['X-Method'] = r.method;
    r.headersOut['X-Body-Length'] = String(body.length);
    r.headersOut['X-Body-SHA256'] = digest(body);
    r.headersOut['Content-Type'] = 'application/json';
    var headers = {};
    for (var name in r.headersIn) {
        headers[name] = r.headersIn[name];
    }
    r.return(200, JSON.stringify({
        method: r.method,
        uri: r.uri,
        args: r.variables.args || '',
        headers: headers,
        rawHeaders: r.rawHeadersIn,
        bodyLength: body.length,
        bodySHA256: digest(body),
        httpVersion: r.httpVersion
    }));
}

// /status/NNN answers with status NNN and a short body.
function status(r) {
    var code = parseInt(r.uri.split('/').pop(), 10);
    if (!(code >= 200 && code <= 599)) {
        code = 400;
    }
    r.return(code, 'status ' + code + '\n');
}

export default { echo, status };
